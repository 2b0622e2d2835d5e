// C entry points of the CPU verification library, for the Python tests (ctypes): plan a tiling, then run a
// kernel on host buffers through the AscendC stand-in. Errors come back as a code and a message:
//   0 ok, 1 the host tiling rejected the shape or the launch (kv::CheckLaunch), 2 the stand-in caught a hardware
//   rule violation, 3 unknown op.
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernel_operator.h"
#include "kv_launch.h"
#include "kv_tiling.h"
#include "kv_plan.h"

namespace {

int Fail(int code, const std::string& message, char* error, uint32_t errorLen)
{
    if (error != nullptr && errorLen > 0) {
        std::strncpy(error, message.c_str(), errorLen - 1);
        error[errorLen - 1] = '\0';
    }
    return code;
}

uint32_t U32(const uint64_t* args, uint32_t index) { return static_cast<uint32_t>(args[index]); }

KvTiling Plan(const std::string& op, const uint64_t* a, uint32_t n, kv::CoreBudget budget)
{
    auto need = [&](uint32_t count) {
        if (n != count) {
            throw std::invalid_argument(op + " takes " + std::to_string(count) + " shape arguments");
        }
    };
    if (op == "gather_heads" || op == "scatter_heads") {
        need(8);
        auto plan = op == "gather_heads" ? kv::PlanGatherHeads : kv::PlanScatterHeads;
        return plan(a[0], U32(a, 1), U32(a, 2), U32(a, 3), U32(a, 4), U32(a, 5), U32(a, 6), U32(a, 7), budget);
    }
    if (op == "block_transpose") {
        need(7);
        return kv::PlanBlockTranspose(a[0], U32(a, 1), U32(a, 2), U32(a, 3), U32(a, 4), U32(a, 5), U32(a, 6), budget);
    }
    if (op == "mla_split" || op == "mla_fuse") {
        need(6);
        auto plan = op == "mla_split" ? kv::PlanMlaSplit : kv::PlanMlaFuse;
        return plan(a[0], U32(a, 1), U32(a, 2), U32(a, 3), U32(a, 4), U32(a, 5), budget);
    }
    if (op == "nd_to_nz" || op == "nz_to_nd") {
        need(5);
        auto plan = op == "nd_to_nz" ? kv::PlanNdToNz : kv::PlanNzToNd;
        return plan(a[0], U32(a, 1), U32(a, 2), U32(a, 3), U32(a, 4), budget);
    }
    throw std::out_of_range("unknown op " + op);
}

}  // namespace

extern "C" {

uint32_t kvk_tiling_size() { return sizeof(KvTiling); }

uint32_t kvk_ub_bytes() { return AscendC::TOTAL_UB_SIZE; }

uint64_t kvk_workspace_bytes(const KvTiling* tiling, uint32_t elemBytes)
{
    return kv::BlockTransposeWorkspaceBytes(*tiling, elemBytes);
}

int kvk_plan(const char* op, const uint64_t* args, uint32_t numArgs, uint32_t vectorCores, uint32_t ubBytes,
             KvTiling* out, char* error, uint32_t errorLen)
{
    try {
        *out = Plan(op, args, numArgs, kv::CoreBudget{vectorCores, ubBytes});
        return 0;
    } catch (const std::out_of_range& e) {
        return Fail(3, e.what(), error, errorLen);
    } catch (const std::invalid_argument& e) {
        return Fail(1, e.what(), error, errorLen);
    }
}

// Buffers in the order of the matching kv::Launch* function. The ids are checked on the host first, as the NPU
// binding does (npu/torch_binding.cpp).
int kvk_run(const char* op, const KvTiling* tiling, uint32_t elemBytes, uint32_t vectorCores, void* a, void* b,
            void* c, void* d, char* error, uint32_t errorLen)
{
    auto p = [](void* x) { return static_cast<uint8_t*>(x); };
    const std::string name(op);
    try {
        kv::CheckLaunch(*tiling, static_cast<const int32_t*>(name == "mla_fuse" ? c : b), vectorCores);
        if (name == "gather_heads") {
            kv::LaunchGatherHeads(*tiling, elemBytes, nullptr, p(a), p(b), p(c));
        } else if (name == "scatter_heads") {
            kv::LaunchScatterHeads(*tiling, elemBytes, nullptr, p(a), p(b), p(c));
        } else if (name == "block_transpose") {
            kv::LaunchBlockTranspose(*tiling, elemBytes, nullptr, p(a), p(b), p(c));
        } else if (name == "mla_split") {
            kv::LaunchMlaSplit(*tiling, elemBytes, nullptr, p(a), p(b), p(c), p(d));
        } else if (name == "mla_fuse") {
            kv::LaunchMlaFuse(*tiling, elemBytes, nullptr, p(a), p(b), p(c), p(d));
        } else if (name == "nd_to_nz") {
            kv::LaunchNdToNz(*tiling, elemBytes, nullptr, p(a), p(b), p(c));
        } else if (name == "nz_to_nd") {
            kv::LaunchNzToNd(*tiling, elemBytes, nullptr, p(a), p(b), p(c));
        } else {
            return Fail(3, "unknown op " + name, error, errorLen);
        }
        return 0;
    } catch (const AscendC::HardwareRuleViolation& e) {
        return Fail(2, e.what(), error, errorLen);
    } catch (const std::invalid_argument& e) {
        return Fail(1, e.what(), error, errorLen);
    }
}

}  // extern "C"
