# Where nanprov's parts lie, relative to one prefix. The nanprov command finds every part from its
# own path (cli/install_layout.h), so the same layout serves the build tree, `cmake --install`,
# and `pip install` (scikit-build-core), and a prefix can be moved (a venv copied into an image, a
# shared filesystem mounted elsewhere):
#   <prefix>/bin/nanprov
#   <prefix>/lib/nanprov/nanprov-replay, libnanprov_probes.so
#   <prefix>/share/nanprov/bootstrap/     what the training process imports (sitecustomize.py)
#   <prefix>/share/nanprov/build.json     the Python it was built with, and how it was installed
set(NANPROV_LIB_SUBDIR "lib/nanprov")
set(NANPROV_SHARE_SUBDIR "share/nanprov")

# The build tree is laid out the same way: the bootstrap is a link to the sources, so edits to
# it take effect without a rebuild.
file(MAKE_DIRECTORY "${PROJECT_BINARY_DIR}/${NANPROV_SHARE_SUBDIR}")
file(CREATE_LINK "${PROJECT_SOURCE_DIR}/probes/bootstrap" "${PROJECT_BINARY_DIR}/${NANPROV_SHARE_SUBDIR}/bootstrap"
     SYMBOLIC)

# pip installs a wheel's scripts into <env>/bin and its data into <env>: the same prefix.
if(SKBUILD)
  set(NANPROV_INSTALLED_BY "pip")
  set(NANPROV_INSTALL_BIN "${SKBUILD_SCRIPTS_DIR}")
  set(NANPROV_INSTALL_LIB "${SKBUILD_DATA_DIR}/${NANPROV_LIB_SUBDIR}")
  set(NANPROV_INSTALL_SHARE "${SKBUILD_DATA_DIR}/${NANPROV_SHARE_SUBDIR}")
else()
  set(NANPROV_INSTALLED_BY "cmake --install")
  set(NANPROV_INSTALL_BIN "bin")
  set(NANPROV_INSTALL_LIB "${NANPROV_LIB_SUBDIR}")
  set(NANPROV_INSTALL_SHARE "${NANPROV_SHARE_SUBDIR}")
endif()

# What the command cannot find from its path: the Python it was built with (for a build tree or
# a prefix outside that Python's environment), the sources and build tree that rebuild it.
function(nanprov_write_build_json path installed_by)
  set(doc "{}")
  foreach(pair "installed_by;${installed_by}" "python;${Python3_EXECUTABLE}" "source_dir;${PROJECT_SOURCE_DIR}"
               "build_dir;${PROJECT_BINARY_DIR}")
    list(GET pair 0 key)
    list(GET pair 1 value)
    string(REPLACE "\\" "\\\\" value "${value}")
    string(REPLACE "\"" "\\\"" value "${value}")
    string(JSON doc SET "${doc}" "${key}" "\"${value}\"")
  endforeach()
  file(WRITE "${path}" "${doc}\n")
endfunction()
nanprov_write_build_json("${PROJECT_BINARY_DIR}/${NANPROV_SHARE_SUBDIR}/build.json" "build tree")
nanprov_write_build_json("${PROJECT_BINARY_DIR}/install/build.json" "${NANPROV_INSTALLED_BY}")

# Libraries and the replay engine find torch's libraries in the Python environment they are
# installed into (<env>/lib/pythonX.Y/site-packages/torch/lib, relative to <env>/lib/nanprov),
# else where they were built against.
get_filename_component(_nanprov_torch_lib "${TORCH_LIBRARY}" DIRECTORY)
set(NANPROV_INSTALL_RPATH
    "$ORIGIN/../python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/site-packages/torch/lib;${_nanprov_torch_lib}")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/probes/bootstrap/" DESTINATION "${NANPROV_INSTALL_SHARE}/bootstrap"
        PATTERN "__pycache__" EXCLUDE)
install(FILES "${PROJECT_BINARY_DIR}/install/build.json" DESTINATION "${NANPROV_INSTALL_SHARE}")
