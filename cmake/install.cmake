# install.cmake — `cmake --install BUILD [--prefix P]` / `ninja install` rules.
# Included from the top-level CMakeLists.txt after the inferd target is defined.
#
#   P/bin/inferd
#   P/lib/systemd/system/inferd.service      (ExecStart= points at the configured bin dir)
#   P/share/inferd/inferd.example.json       (copy to /etc/inferd/inferd.json)
#   P/share/doc/inferd/{README.md,LICENSE,default-model.md,docker.md}
#
# The unit directory is lib/systemd/system under the prefix whatever the libdir is
# (systemd reads /usr/lib/systemd/system and /usr/local/lib/systemd/system); override
# with -DINFERD_SYSTEMD_UNITDIR=... (relative to the prefix, or absolute). The unit's
# binary path is fixed at configure time from CMAKE_INSTALL_PREFIX, so staging with
# `--prefix` or DESTDIR at install time does not change it.
include(GNUInstallDirs)

set(INFERD_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "where the systemd unit is installed (relative to the install prefix, or absolute)")

install(TARGETS inferd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT inferd)

# The unit in configs/ says /usr/local/bin/inferd; point it at this build's bin dir.
set(_inferd_unit_src ${PROJECT_SOURCE_DIR}/configs/inferd.service)
set(_inferd_unit_out ${PROJECT_BINARY_DIR}/packaging/inferd.service)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_inferd_unit_src})
file(READ ${_inferd_unit_src} _inferd_unit)
string(REPLACE "/usr/local/bin/inferd" "${CMAKE_INSTALL_FULL_BINDIR}/inferd" _inferd_unit "${_inferd_unit}")
string(REPLACE "/usr/local/share/doc/inferd" "${CMAKE_INSTALL_FULL_DOCDIR}" _inferd_unit "${_inferd_unit}")
set(_inferd_unit_old "")
if(EXISTS ${_inferd_unit_out})
  file(READ ${_inferd_unit_out} _inferd_unit_old)
endif()
if(NOT _inferd_unit_old STREQUAL _inferd_unit)
  file(WRITE ${_inferd_unit_out} "${_inferd_unit}")
endif()
install(FILES ${_inferd_unit_out} DESTINATION ${INFERD_SYSTEMD_UNITDIR} COMPONENT inferd)

install(FILES ${PROJECT_SOURCE_DIR}/configs/inferd.example.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/inferd COMPONENT inferd)

install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/LICENSE
              ${PROJECT_SOURCE_DIR}/docs/default-model.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT inferd)
install(FILES ${PROJECT_SOURCE_DIR}/docker/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
        RENAME docker.md COMPONENT inferd)
