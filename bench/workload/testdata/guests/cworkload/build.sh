#!/bin/sh
# Builds the cworkload guest: a WASI reactor from workload.c, with clang and
# wasi-libc from Debian's packages (clang-14 lld-14 wasi-libc
# libclang-rt-14-dev-wasm32).
#
#   ./build.sh [OUT]        # OUT defaults to cworkload.wasm beside workload.c
#   CC=clang ./build.sh     # another clang that targets wasm32-wasi
set -eu
here=$(dirname "$0")
exec "${CC:-clang-14}" --target=wasm32-wasi -mexec-model=reactor \
	-std=c11 -O2 -Wall -Wextra \
	-Wl,--strip-all \
	-o "${1:-$here/cworkload.wasm}" "$here/workload.c"
