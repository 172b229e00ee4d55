"""CTest driver of the Python binding: `python run_tests.py [pytest arguments]` runs the tests,
`python run_tests.py --example [NAME]` runs examples/NAME.py (default layer_norm_softmax).

Exits 77 (CTest's SKIP_RETURN_CODE for these tests) when NumPy or pytest cannot be imported, so
a missing toolchain shows as skipped. Writes nothing into the source tree."""
import os
import sys

sys.dont_write_bytecode = True
for module in ("numpy", "pytest"):
    try:
        __import__(module)
    except ImportError:
        print("SKIPPED: %s cannot import %s (Debian: apt-get install python3-numpy python3-pytest)"
              % (sys.executable, module))
        sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
if sys.argv[1:2] == ["--example"] and len(sys.argv) <= 3:
    import runpy

    name = sys.argv[2] if len(sys.argv) == 3 else "layer_norm_softmax"
    runpy.run_path(os.path.join(here, "examples", name + ".py"), run_name="__main__")
    sys.exit(0)

import pytest  # noqa: E402

sys.exit(pytest.main(["-p", "no:cacheprovider", "-rs", os.path.join(here, "tests")] + sys.argv[1:]))
