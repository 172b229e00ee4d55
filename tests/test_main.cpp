// The one doctest main shared by every suite (built once, as a static library).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
