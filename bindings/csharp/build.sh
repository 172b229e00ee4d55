#!/bin/sh
# Builds the C# binding with Mono's mcs: build.sh OUT_DIR [MCS]
#   OUT_DIR/Xvk.dll (+ Xvk.dll.config), OUT_DIR/XvkTests.exe, OUT_DIR/Example.exe,
#   OUT_DIR/BatchNormExample.exe
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$1
mcs=${2:-mcs}
mkdir -p "$out"
"$mcs" -nologo -warnaserror -target:library -out:"$out/Xvk.dll" "$here"/Xvk/*.cs
cp "$here/Xvk.dll.config" "$out/Xvk.dll.config"
"$mcs" -nologo -warnaserror -r:"$out/Xvk.dll" -out:"$out/XvkTests.exe" "$here/tests/XvkTests.cs"
"$mcs" -nologo -warnaserror -r:"$out/Xvk.dll" -out:"$out/Example.exe" "$here/examples/Example.cs"
"$mcs" -nologo -warnaserror -r:"$out/Xvk.dll" -out:"$out/BatchNormExample.exe" "$here/examples/BatchNormExample.cs"
echo "built $out/Xvk.dll, XvkTests.exe, Example.exe, BatchNormExample.exe"
