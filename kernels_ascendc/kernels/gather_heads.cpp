// gather_heads: packs heads [srcColumn / head_dim, +copyElems / head_dim) of the listed NHD blocks into a
// contiguous [n, block_size, head_count, head_dim] buffer, one listed block per core share.
#include "kv_kernel_common.h"
#include "kv_launch.h"

template <typename T>
class GatherHeads {
public:
    __aicore__ inline void Init(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR packed, const KvTiling& t,
                                AscendC::TPipe* pipe)
    {
        t_ = t;
        cache_.SetGlobalBuffer((__gm__ T*)cache, t.srcBlocks * t.tokens * t.srcRowElems);
        packed_.SetGlobalBuffer((__gm__ T*)packed, t.dstBlocks * t.tokens * t.dstRowElems);
        ids_.SetGlobalBuffer((__gm__ int32_t*)blockIds, t.numIds);
        mover_.Init(pipe, t);
    }

    __aicore__ inline void Process()
    {
        kv::CoreSpan span = kv::CoreIds(t_);
        for (uint32_t i = span.first; i < span.last; ++i) {
            uint64_t block = static_cast<uint64_t>(ids_.GetValue(i));
            mover_.Move(cache_[block * t_.tokens * t_.srcRowElems + t_.srcColumn], t_.srcRowElems,
                        packed_[static_cast<uint64_t>(i) * t_.tokens * t_.dstRowElems], t_.dstRowElems, t_.tokens,
                        t_.copyElems);
        }
    }

private:
    KvTiling t_;
    AscendC::GlobalTensor<T> cache_, packed_;
    AscendC::GlobalTensor<int32_t> ids_;
    kv::RowMover<T> mover_;
};

extern "C" __global__ __aicore__ void gather_heads_b16(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR packed,
                                                       KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    GatherHeads<uint16_t> op;
    op.Init(cache, blockIds, packed, tiling, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void gather_heads_b8(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR packed,
                                                      KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    GatherHeads<uint8_t> op;
    op.Init(cache, blockIds, packed, tiling, &pipe);
    op.Process();
}

void kv::LaunchGatherHeads(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* cache, uint8_t* blockIds,
                           uint8_t* packed)
{
    if (elemBytes == 2) {
        KV_LAUNCH(gather_heads_b16, t.usedCores, stream, cache, blockIds, packed, t);
    } else {
        KV_LAUNCH(gather_heads_b8, t.usedCores, stream, cache, blockIds, packed, t);
    }
}
