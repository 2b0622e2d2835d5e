// Host-side tiling of the KV layout kernels: how the listed blocks split across vector cores, how many token
// rows go through the unified buffer at a time, and whether rows can use DataCopy (32-byte aligned) or need
// DataCopyPad. Throws std::invalid_argument for shapes the kernels cannot move.
#ifndef ASCEND_PD_HOST_KV_PLAN_H
#define ASCEND_PD_HOST_KV_PLAN_H

#include <cstdint>

#include "kv_tiling.h"

namespace kv {

struct CoreBudget {
    uint32_t vectorCores;  // from ACL_DEVICE_INFO_VECTOR_CORE_NUM on the device
    uint32_t ubBytes;      // unified buffer per core: 192 KiB on Atlas A2/A3
};

KvTiling PlanGatherHeads(uint64_t numBlocks, uint32_t tokens, uint32_t heads, uint32_t headDim, uint32_t elemBytes,
                         uint32_t numIds, uint32_t headStart, uint32_t headCount, CoreBudget budget);
KvTiling PlanScatterHeads(uint64_t numBlocks, uint32_t tokens, uint32_t heads, uint32_t headDim, uint32_t elemBytes,
                          uint32_t numIds, uint32_t headStart, uint32_t headCount, CoreBudget budget);
KvTiling PlanBlockTranspose(uint64_t numBlocks, uint32_t tokens, uint32_t heads, uint32_t headDim,
                            uint32_t elemBytes, uint32_t numIds, uint32_t split, CoreBudget budget);
KvTiling PlanMlaSplit(uint64_t numBlocks, uint32_t tokens, uint32_t loraRank, uint32_t ropeDim, uint32_t elemBytes,
                      uint32_t numIds, CoreBudget budget);
KvTiling PlanMlaFuse(uint64_t numBlocks, uint32_t tokens, uint32_t loraRank, uint32_t ropeDim, uint32_t elemBytes,
                     uint32_t numIds, CoreBudget budget);
KvTiling PlanNdToNz(uint64_t numBlocks, uint32_t tokens, uint32_t features, uint32_t elemBytes, uint32_t numIds,
                    CoreBudget budget);
KvTiling PlanNzToNd(uint64_t numBlocks, uint32_t tokens, uint32_t features, uint32_t elemBytes, uint32_t numIds,
                    CoreBudget budget);

// Host checks before a launch, on the ids the kernel will read: each names a block inside the tensor it indexes
// (a bad id would become a wild GM address on the device, which checks nothing), and the launch covers every id
// on at most the device's vector cores. Throws std::invalid_argument.
void CheckLaunch(const KvTiling& t, const int32_t* hostIds, uint32_t vectorCores);

// Bytes of GM workspace block_transpose needs (zero when every block is staged in UB).
uint64_t BlockTransposeWorkspaceBytes(const KvTiling& t, uint32_t elemBytes);

}  // namespace kv

#endif
