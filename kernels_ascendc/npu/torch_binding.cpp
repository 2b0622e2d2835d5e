// torch.ops.ascend_pd.*: the KV layout ops on NPU tensors. Each op checks its tensors, plans the tiling on the
// host, allocates outputs, and queues the kernel launch on the current NPU stream through OpCommand.
// Argument checks with readable messages live in ascend_pd/kernels (Python); these TORCH_CHECKs guard the device.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>
#include <torch_npu/csrc/framework/OpCommand.h>

#include <tuple>

#include "acl/acl.h"
#include "kv_launch.h"
#include "kv_plan.h"

namespace {

constexpr uint32_t UB_BYTES_ARCH_2201 = 192 * 1024;  // Atlas A2 / A3 vector core unified buffer

kv::CoreBudget DeviceBudget()
{
    int32_t device = 0;
    TORCH_CHECK(aclrtGetDevice(&device) == ACL_SUCCESS, "aclrtGetDevice failed");
    int64_t vectorCores = 0;
    TORCH_CHECK(aclGetDeviceCapability(device, ACL_DEVICE_INFO_VECTOR_CORE_NUM, &vectorCores) == ACL_SUCCESS,
                "aclGetDeviceCapability(ACL_DEVICE_INFO_VECTOR_CORE_NUM) failed");
    // the kernels are vector-only (KERNEL_TYPE_AIV_ONLY): blockDim must not exceed the vector cores
    TORCH_CHECK(vectorCores > 0 && vectorCores <= UINT32_MAX, "device ", device, " reports ", vectorCores,
                " vector cores: the KV kernels need the vector cores of an Atlas A2/A3 device");
    return kv::CoreBudget{static_cast<uint32_t>(vectorCores), UB_BYTES_ARCH_2201};
}

// The host check of kv::CheckLaunch on the ids the kernel will read. Copying them back waits for the stream, which
// is the price of never handing the device an id it would turn into a wild GM address.
void CheckLaunch(const KvTiling& t, const at::Tensor& ids, const kv::CoreBudget& budget)
{
    at::Tensor hostIds = ids.to(at::kCPU).contiguous();
    try {
        kv::CheckLaunch(t, hostIds.data_ptr<int32_t>(), budget.vectorCores);
    } catch (const std::invalid_argument& e) {
        TORCH_CHECK_INDEX(false, e.what());
    }
}

void CheckKv(const at::Tensor& t, const char* name, int64_t dims)
{
    TORCH_CHECK(t.dim() == dims && t.is_contiguous(), name, " must be a contiguous ", dims, "-D tensor");
    TORCH_CHECK(t.element_size() == 1 || t.element_size() == 2, name, " must be bf16, fp16 or int8");
}

void CheckIds(const at::Tensor& ids)
{
    TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == at::kInt && ids.is_contiguous(),
                "block_ids must be a contiguous 1-D int32 tensor on the device");
}

uint8_t* Bytes(const at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

// Queue one kernel launch; the lambdas capture the tensors by value, which keeps them alive until it runs.
template <typename Launch>
void Enqueue(const char* name, Launch launch)
{
    aclrtStream stream = c10_npu::getCurrentNPUStream().stream();  // the caller's stream, not the queue thread's
    at_npu::native::OpCommand cmd;
    cmd.Name(name);
    cmd.SetCustomHandler([launch, stream]() -> int {
        launch(stream);
        return 0;
    });
    cmd.Run();
}

// Packs into `packed` (a new tensor, or the caller's registered staging buffer for gather_heads_into).
void GatherHeadsInto(const at::Tensor& cache, const at::Tensor& ids, int64_t headStart, int64_t headCount,
                     const at::Tensor& packed)
{
    CheckKv(cache, "cache", 4);
    CheckKv(packed, "out", 4);
    CheckIds(ids);
    TORCH_CHECK(packed.size(0) == ids.size(0) && packed.size(1) == cache.size(1) && packed.size(2) == headCount &&
                packed.size(3) == cache.size(3) && packed.scalar_type() == cache.scalar_type(),
                "out must be [n, block_size, head_count, head_dim] of the cache's dtype");
    const uint32_t e = cache.element_size();
    const kv::CoreBudget budget = DeviceBudget();
    KvTiling t = kv::PlanGatherHeads(cache.size(0), cache.size(1), cache.size(2), cache.size(3), e, ids.size(0),
                                     headStart, headCount, budget);
    CheckLaunch(t, ids, budget);
    Enqueue("ascend_pd_gather_heads", [=](void* stream) {
        kv::LaunchGatherHeads(t, e, stream, Bytes(cache), Bytes(ids), Bytes(packed));
    });
}

at::Tensor GatherHeads(const at::Tensor& cache, const at::Tensor& ids, int64_t headStart, int64_t headCount)
{
    CheckKv(cache, "cache", 4);
    CheckIds(ids);
    at::Tensor packed = at::empty({ids.size(0), cache.size(1), headCount, cache.size(3)}, cache.options());
    GatherHeadsInto(cache, ids, headStart, headCount, packed);
    return packed;
}

void ScatterHeads(const at::Tensor& cache, const at::Tensor& ids, int64_t headStart, const at::Tensor& packed)
{
    CheckKv(cache, "cache", 4);
    CheckKv(packed, "packed", 4);
    CheckIds(ids);
    const uint32_t e = cache.element_size();
    const kv::CoreBudget budget = DeviceBudget();
    KvTiling t = kv::PlanScatterHeads(cache.size(0), cache.size(1), cache.size(2), cache.size(3), e, ids.size(0),
                                      headStart, packed.size(2), budget);
    CheckLaunch(t, ids, budget);
    Enqueue("ascend_pd_scatter_heads", [=](void* stream) {
        kv::LaunchScatterHeads(t, e, stream, Bytes(cache), Bytes(ids), Bytes(packed));
    });
}

void BlockTranspose(const at::Tensor& cache, const at::Tensor& ids, int64_t split)
{
    CheckKv(cache, "cache", 4);
    CheckIds(ids);
    const uint32_t e = cache.element_size();
    const kv::CoreBudget budget = DeviceBudget();
    KvTiling t = kv::PlanBlockTranspose(cache.size(0), cache.size(1), cache.size(2), cache.size(3), e, ids.size(0),
                                        split, budget);
    CheckLaunch(t, ids, budget);
    const int64_t workspaceBytes = static_cast<int64_t>(kv::BlockTransposeWorkspaceBytes(t, e));
    at::Tensor workspace = at::empty({workspaceBytes > 0 ? workspaceBytes : 32}, cache.options().dtype(at::kByte));
    Enqueue("ascend_pd_block_transpose", [=](void* stream) {
        kv::LaunchBlockTranspose(t, e, stream, Bytes(cache), Bytes(ids), Bytes(workspace));
    });
}

std::tuple<at::Tensor, at::Tensor> MlaSplit(const at::Tensor& fused, const at::Tensor& ids, int64_t ropeDim)
{
    CheckKv(fused, "fused", 3);
    CheckIds(ids);
    const uint32_t e = fused.element_size();
    const int64_t lora = fused.size(2) - ropeDim;
    const kv::CoreBudget budget = DeviceBudget();
    KvTiling t = kv::PlanMlaSplit(fused.size(0), fused.size(1), lora, ropeDim, e, ids.size(0), budget);
    CheckLaunch(t, ids, budget);
    at::Tensor nope = at::empty({ids.size(0), fused.size(1), 1, lora}, fused.options());
    at::Tensor rope = at::empty({ids.size(0), fused.size(1), 1, ropeDim}, fused.options());
    Enqueue("ascend_pd_mla_split", [=](void* stream) {
        kv::LaunchMlaSplit(t, e, stream, Bytes(fused), Bytes(ids), Bytes(nope), Bytes(rope));
    });
    return {nope, rope};
}

at::Tensor MlaFuse(const at::Tensor& nope, const at::Tensor& rope, const at::Tensor& ids)
{
    CheckKv(nope, "nope", 4);
    CheckKv(rope, "rope", 4);
    CheckIds(ids);
    const uint32_t e = nope.element_size();
    const kv::CoreBudget budget = DeviceBudget();
    KvTiling t = kv::PlanMlaFuse(nope.size(0), nope.size(1), nope.size(3), rope.size(3), e, ids.size(0), budget);
    CheckLaunch(t, ids, budget);
    at::Tensor fused = at::empty({ids.size(0), nope.size(1), nope.size(3) + rope.size(3)}, nope.options());
    Enqueue("ascend_pd_mla_fuse", [=](void* stream) {
        kv::LaunchMlaFuse(t, e, stream, Bytes(nope), Bytes(rope), Bytes(ids), Bytes(fused));
    });
    return fused;
}

at::Tensor NdToNz(const at::Tensor& cache, const at::Tensor& ids)
{
    CheckKv(cache, "cache", 4);
    CheckIds(ids);
    const uint32_t e = cache.element_size();
    const int64_t features = cache.size(2) * cache.size(3);
    const int64_t c0 = 32 / e;
    const kv::CoreBudget budget = DeviceBudget();
    KvTiling t = kv::PlanNdToNz(cache.size(0), cache.size(1), features, e, ids.size(0), budget);
    CheckLaunch(t, ids, budget);
    at::Tensor nz = at::empty({ids.size(0), features / c0, cache.size(1), c0}, cache.options());
    Enqueue("ascend_pd_nd_to_nz", [=](void* stream) {
        kv::LaunchNdToNz(t, e, stream, Bytes(cache), Bytes(ids), Bytes(nz));
    });
    return nz;
}

at::Tensor NzToNd(const at::Tensor& nz, const at::Tensor& ids, int64_t headDim)
{
    CheckKv(nz, "nz_cache", 4);
    CheckIds(ids);
    const uint32_t e = nz.element_size();
    const int64_t features = nz.size(1) * nz.size(3);
    TORCH_CHECK(headDim > 0 && features % headDim == 0, "head_dim must divide heads * head_dim");
    const kv::CoreBudget budget = DeviceBudget();
    KvTiling t = kv::PlanNzToNd(nz.size(0), nz.size(2), features, e, ids.size(0), budget);
    CheckLaunch(t, ids, budget);
    at::Tensor nd = at::empty({ids.size(0), nz.size(2), features / headDim, headDim}, nz.options());
    Enqueue("ascend_pd_nz_to_nd", [=](void* stream) {
        kv::LaunchNzToNd(t, e, stream, Bytes(nz), Bytes(ids), Bytes(nd));
    });
    return nd;
}

}  // namespace

TORCH_LIBRARY(ascend_pd, m)
{
    m.def("gather_heads(Tensor cache, Tensor block_ids, int head_start, int head_count) -> Tensor");
    m.def("gather_heads_into(Tensor cache, Tensor block_ids, int head_start, int head_count, Tensor(a!) out) -> ()");
    m.def("scatter_heads(Tensor(a!) cache, Tensor block_ids, int head_start, Tensor packed) -> ()");
    m.def("block_transpose(Tensor(a!) cache, Tensor block_ids, int split) -> ()");
    m.def("mla_split(Tensor fused, Tensor block_ids, int rope_dim) -> (Tensor, Tensor)");
    m.def("mla_fuse(Tensor nope, Tensor rope, Tensor block_ids) -> Tensor");
    m.def("nd_to_nz(Tensor cache, Tensor block_ids) -> Tensor");
    m.def("nz_to_nd(Tensor nz_cache, Tensor block_ids, int head_dim) -> Tensor");
}

TORCH_LIBRARY_IMPL(ascend_pd, PrivateUse1, m)
{
    m.impl("gather_heads", &GatherHeads);
    m.impl("gather_heads_into", &GatherHeadsInto);
    m.impl("scatter_heads", &ScatterHeads);
    m.impl("block_transpose", &BlockTranspose);
    m.impl("mla_split", &MlaSplit);
    m.impl("mla_fuse", &MlaFuse);
    m.impl("nd_to_nz", &NdToNz);
    m.impl("nz_to_nd", &NzToNd);
}
