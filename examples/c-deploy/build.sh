#!/bin/sh
# Builds the c-deploy guest: a WASI reactor from deploy.c, with clang and
# wasi-libc from Debian's packages (clang-14 lld-14 wasi-libc
# libclang-rt-14-dev-wasm32).
#
#   ./build.sh [OUT]        # OUT defaults to c-deploy.wasm beside deploy.c
#   CC=clang ./build.sh     # another clang that targets wasm32-wasi
#
# c-deploy.wasm is committed, so that the tests need only Go: they read it when
# clang-14 is missing and rebuild it when it is there, and .ci/run rebuilds
# it with clang-14 and fails unless the bytes are those committed. The build
# is reproducible: the flags are fixed and the output is stripped, so it
# holds no path or time (two builds from different directories give the same
# bytes). After a change to deploy.c, run ./build.sh and commit both.
set -eu
here=$(dirname "$0")
exec "${CC:-clang-14}" --target=wasm32-wasi -mexec-model=reactor \
	-std=c11 -O2 -Wall -Wextra \
	-Wl,--strip-all \
	-o "${1:-$here/c-deploy.wasm}" "$here/deploy.c"
