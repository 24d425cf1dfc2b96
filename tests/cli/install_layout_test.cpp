// Where the nanprov command finds its parts: from its own path, whatever prefix it was installed
// or moved to (issue 49).
#include "cli/install_layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace nanprov::cli {
namespace {
namespace fs = std::filesystem;

fs::path prefixWith(const std::string& name, const std::string& build_json, bool env_python) {
  fs::path p = fs::temp_directory_path() / ("nanprov-layout-" + std::to_string(getpid()) + "-" + name);
  fs::remove_all(p);
  fs::create_directories(p / "bin");
  fs::create_directories(p / "share/nanprov");
  std::ofstream(p / "share/nanprov/build.json") << build_json;
  if (env_python) {
    std::ofstream(p / "bin/python3") << "#!/bin/sh\n";
    chmod((p / "bin/python3").c_str(), 0755);
  }
  return p;
}

TEST(InstallLayout, PartsAreFoundBesideTheCommandWhereverThePrefixIs) {
  fs::path p =
      prefixWith("moved", R"({"installed_by": "pip", "python": "/gone/bin/python", "source_dir": "/gone/src"})", true);
  InstallLayout l = layoutOf((p / "bin/nanprov").string());
  EXPECT_EQ(l.prefix, p.string());
  EXPECT_EQ(l.probes_library, (p / "lib/nanprov/libnanprov_probes.so").string());
  EXPECT_EQ(l.replay_engine, (p / "lib/nanprov/nanprov-replay").string());
  EXPECT_EQ(l.bootstrap_dir, (p / "share/nanprov/bootstrap").string());
  EXPECT_EQ(l.installed_by, "pip");
  // pip installed it into this environment: its Python moved with it.
  EXPECT_EQ(l.python, (p / "bin/python3").string());
  // The sources it was built from are gone: the advice says what to pass, not a dead path.
  EXPECT_EQ(
      l.rebuildCommand("/env/bin/python"),
      "/env/bin/python -m pip install --no-build-isolation --force-reinstall --no-deps <the nanprov sources or sdist>");
  fs::remove_all(p);
}

TEST(InstallLayout, APrefixOutsideAnEnvironmentKeepsThePythonItWasBuiltWith) {
  fs::path p = prefixWith(
      "cmake",
      R"({"installed_by": "cmake --install", "python": "/bin/sh", "source_dir": "/src", "build_dir": "/src/build"})",
      true);
  InstallLayout l = layoutOf((p / "bin/nanprov").string());
  EXPECT_EQ(l.python, "/bin/sh") << "the recorded Python exists: a python3 that happens to share the prefix is not it";
  EXPECT_EQ(l.rebuildCommand("/opt/py"),
            "cmake -S /src -B /src/build-rebuilt -DPython3_EXECUTABLE=/opt/py && cmake --build "
            "/src/build-rebuilt && cmake --install /src/build-rebuilt --prefix " +
                p.string());
  fs::remove_all(p);
}

TEST(InstallLayout, WithoutItsBuildFileTheLayoutStillStands) {
  fs::path p = prefixWith("bare", "not json", false);
  InstallLayout l = layoutOf((p / "bin/nanprov").string());
  EXPECT_EQ(l.installed_by, "");
  EXPECT_EQ(l.python, "python3");
  EXPECT_EQ(l.probes_library, (p / "lib/nanprov/libnanprov_probes.so").string());
  fs::remove_all(p);
}

TEST(InstallLayout, ThisBuildTreeHasEveryPart) {
  InstallLayout built = layoutOf(NANPROV_BIN);
  EXPECT_EQ(built.installed_by, "build tree");
  EXPECT_TRUE(fs::exists(built.bootstrap_dir + "/sitecustomize.py")) << built.bootstrap_dir;
  EXPECT_EQ(built.python, NANPROV_PYTHON);
}

}  // namespace
}  // namespace nanprov::cli
