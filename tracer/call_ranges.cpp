// NVTX 3 is header-only: without an attached tool every call is a check of a null pointer.
#include <nvtx3/nvToolsExt.h>

#include <cstdlib>
#include <string>

#include "tracer/kernel_tracer.h"

namespace nanprov {
namespace {

nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("nanprov");
  return d;
}

}  // namespace

void pushCallRange(const std::string& label) {
  nvtxEventAttributes_t attrs = {};
  attrs.version = NVTX_VERSION;
  attrs.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attrs.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attrs.message.ascii = label.c_str();
  nvtxDomainRangePushEx(domain(), &attrs);
}

void popCallRange() { nvtxDomainRangePop(domain()); }

bool nvtxToolAttached() {
  static const bool attached = [] {
    const char* path = std::getenv("NVTX_INJECTION64_PATH");
    return path && *path;
  }();
  return attached;
}

}  // namespace nanprov
