#include "replay/flash_rerun.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "base/child_process.h"
#include "base/text.h"

namespace nanprov::replay {
namespace {
const char* const kOutputRoles[] = {"O", "LSE", "dQ", "dK", "dV"};

// A private directory for the helper's output, removed when the rerun is done. Plain POSIX calls,
// not std::filesystem: torch 2.11's CUDA libtorch.so exports its own std::filesystem::remove_all,
// which the engine's call bound to and which jumped to address 0 on the H200.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/nanprov-flash-rerun-XXXXXX";
    if (mkdtemp(pattern.data())) path_ = pattern;
  }
  ~ScratchDir() {
    if (path_.empty()) return;
    // Flat: the helper writes its output (and perhaps a temporary beside it) and nothing else.
    if (DIR* dir = opendir(path_.c_str())) {
      while (const dirent* e = readdir(dir)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
          unlink((path_ + "/" + e->d_name).c_str());
      }
      closedir(dir);
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

StatusOr<Outputs> rerunThroughPackage(const store::CaptureFile& file, const std::string& capture_path,
                                      const at::Device& device) {
  const char* python = std::getenv("NANPROV_REPLAY_PYTHON");
  const char* bootstrap = std::getenv("NANPROV_BOOTSTRAP_DIR");
  if (!python || !*python || !bootstrap || !*bootstrap) {
    return Status::Error("no Python to rerun it in (run through nanprov replay, or set NANPROV_REPLAY_PYTHON)");
  }
  ScratchDir scratch;
  if (scratch.path().empty()) return Status::Error("cannot make a temporary directory for the rerun");
  const std::string output = scratch.path() + "/outputs.safetensors";
  // The helper runs in the scratch folder, which holds nothing but its output: `python -m` puts
  // its current directory first on sys.path, and a capture is often replayed inside the bug-report
  // folder it came in, where a planted flash_attn/ or typing_extensions.py would be imported, run,
  // and decide the verdict. Paths it is given are made absolute for that.
  const std::string capture = absolutePath(capture_path);
  // It imports nanprov_boot from the bootstrap folder, and the package from wherever the user's
  // PYTHONPATH says; an empty NANPROV_RUN_DIR keeps the probes from arming in it (set in the
  // child's environment only: other threads here may read ours).
  std::string path = absolutePath(bootstrap);
  if (const char* user = std::getenv("PYTHONPATH"); user && *user) path += std::string(":") + user;
  int code = 0;
  NANPROV_ASSIGN_OR_RETURN(auto said,
                           captureOutput({python, "-m", "nanprov_boot.flash_rerun", capture, output, device.str()},
                                         {{"PYTHONPATH", path}, {"NANPROV_RUN_DIR", ""}}, &code, scratch.path()));
  if (code != 0) {
    std::string why = firstLine(said);
    if (why.empty()) why = "the rerun exited with code " + std::to_string(code);
    return Status::Error((code == 3 ? "not importable with " : "failed with ") + std::string(python) + ": " + why);
  }
  NANPROV_ASSIGN_OR_RETURN(auto rerun, store::readCapture(output));
  // The capture with the rerun's outputs in place of the run's: read back through the same
  // layout code, so both are compared in the same [batch, heads, seq, dim] form.
  store::CaptureFile replaced = file;
  std::erase_if(replaced.tensors, [](const store::CaptureTensor& t) {
    for (const char* role : kOutputRoles) {
      if (t.name == role) return true;
    }
    return false;
  });
  for (store::CaptureTensor& t : rerun.tensors) replaced.tensors.push_back(std::move(t));
  NANPROV_ASSIGN_OR_RETURN(auto call, toCapturedCall(replaced, capture_path));
  Outputs out = capturedOutputs(call);
  if (!out.o.defined() && !out.dq.defined()) return Status::Error("the rerun wrote no output");
  for (at::Tensor* t : {&out.o, &out.lse, &out.dq, &out.dk, &out.dv}) {
    if (t->defined()) *t = t->to(device);  // compared where the reference is
  }
  return out;
}

}  // namespace nanprov::replay
