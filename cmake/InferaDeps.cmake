# Every third-party dependency comes from a Debian package (scripts/install-deps lists them).
find_package(Threads REQUIRED)
find_package(Boost 1.81.0 EXACT REQUIRED COMPONENTS json url CONFIG)
find_package(GTest REQUIRED)
find_package(OpenSSL REQUIRED)     # TLS clients: the Kubernetes API (http/tls.h)
find_package(yaml-cpp REQUIRED)    # --config files and kubeconfig
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
if(INFERA_BENCH)
  find_package(benchmark REQUIRED)
endif()
