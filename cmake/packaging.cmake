# Debian packages by CPack (scripts/package runs it): one package per install
# component of the top CMakeLists.txt.
#   libmempool0         runtime: libmempool.so.0
#   libmempool-malloc0  malloc:  libmempool-malloc.so.0, the LD_PRELOAD drop-in,
#                                and libmempool-malloc-hardened.so.0, the hardened one
#   libmempool-dev      dev:     headers, libmempool.a, the override objects, CMake and
#                                pkg-config files, the libmempool*.so links
# Configure with CMAKE_INSTALL_PREFIX=/usr so that GNUInstallDirs gives the multiarch
# libdir (lib/x86_64-linux-gnu).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mempool)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "mempool maintainers <mempool@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_COMPONENTS_ALL runtime malloc dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Depends from the libraries' own needs (dpkg-shlibdeps: libmempool0 libc6, libstdc++6,
# libgcc-s1; libmempool-malloc0 libc6 alone, docs/architecture.md "Nothing but libc");
# a shlibs file so that packages built against ours depend on it in turn. With the
# libraries under /usr/lib, CPack's postinst and postrm run ldconfig.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libmempool0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "mempool memory pools and thread-caching heap (shared library)\n \
Fixed-size pools, a size-class pool and a general thread-caching heap with a C API.")

set(CPACK_DEBIAN_MALLOC_PACKAGE_NAME libmempool-malloc0)
set(CPACK_DEBIAN_MALLOC_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_MALLOC_DESCRIPTION
  "mempool's heap as malloc and operator new for any program\n \
LD_PRELOAD=libmempool-malloc.so.0 makes a program's malloc family and operator new mempool's;\n \
libmempool-malloc-hardened.so.0 does the same with checks against misuse (canaries, guard pages).")

# The CMake package names libmempool.so.0 and libmempool-malloc.so.0 (mempool::malloc),
# and find_package checks that both files exist: the dev package needs both.
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libmempool-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libmempool0 (= ${PROJECT_VERSION}), libmempool-malloc0 (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "mempool memory pools and thread-caching heap (development files)\n \
Headers, the static library, the malloc override objects, CMake and pkg-config files.")

include(CPack)
