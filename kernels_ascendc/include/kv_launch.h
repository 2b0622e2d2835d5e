// Host entry points of the KV layout kernels: each launches one kernel on tiling.usedCores vector cores.
// elemBytes selects the instantiation (2: bf16/fp16, 1: int8); block ids are int32 in device memory.
#ifndef ASCEND_PD_KV_LAUNCH_H
#define ASCEND_PD_KV_LAUNCH_H

#include <cstdint>

#include "kv_tiling.h"

namespace kv {

void LaunchGatherHeads(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* cache, uint8_t* blockIds,
                       uint8_t* packed);
void LaunchScatterHeads(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* cache, uint8_t* blockIds,
                        uint8_t* packed);
void LaunchBlockTranspose(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* cache, uint8_t* blockIds,
                          uint8_t* workspace);
void LaunchMlaSplit(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* fused, uint8_t* blockIds,
                    uint8_t* nope, uint8_t* rope);
void LaunchMlaFuse(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* nope, uint8_t* rope,
                   uint8_t* blockIds, uint8_t* fused);
void LaunchNdToNz(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* cache, uint8_t* blockIds,
                  uint8_t* nz);
void LaunchNzToNd(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* nz, uint8_t* blockIds,
                  uint8_t* cache);

}  // namespace kv

#endif
