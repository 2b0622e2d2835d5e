// mla_fuse: nope [nb, block_size, 1, kv_lora_rank] and rope [nb, block_size, 1, rope_dim] blocks -> contiguous
// fused [n, block_size, kv_lora_rank + rope_dim] for the listed blocks.
#include "kv_kernel_common.h"
#include "kv_launch.h"

template <typename T>
class MlaFuse {
public:
    __aicore__ inline void Init(GM_ADDR nope, GM_ADDR rope, GM_ADDR blockIds, GM_ADDR fused, const KvTiling& t,
                                AscendC::TPipe* pipe)
    {
        t_ = t;
        ropeElems_ = t.dstRowElems - t.copyElems;
        nope_.SetGlobalBuffer((__gm__ T*)nope, t.srcBlocks * t.tokens * t.copyElems);
        rope_.SetGlobalBuffer((__gm__ T*)rope, t.srcBlocks * t.tokens * ropeElems_);
        fused_.SetGlobalBuffer((__gm__ T*)fused, t.dstBlocks * t.tokens * t.dstRowElems);
        ids_.SetGlobalBuffer((__gm__ int32_t*)blockIds, t.numIds);
        mover_.Init(pipe, t);
    }

    __aicore__ inline void Process()
    {
        kv::CoreSpan span = kv::CoreIds(t_);
        for (uint32_t i = span.first; i < span.last; ++i) {
            uint64_t source = static_cast<uint64_t>(ids_.GetValue(i)) * t_.tokens;
            uint64_t target = static_cast<uint64_t>(i) * t_.tokens * t_.dstRowElems;
            mover_.Move(nope_[source * t_.copyElems], t_.copyElems, fused_[target], t_.dstRowElems, t_.tokens,
                        t_.copyElems);
            mover_.Move(rope_[source * ropeElems_], ropeElems_, fused_[target + t_.copyElems], t_.dstRowElems,
                        t_.tokens, ropeElems_);
        }
    }

private:
    KvTiling t_;
    uint32_t ropeElems_ = 0;
    AscendC::GlobalTensor<T> nope_, rope_, fused_;
    AscendC::GlobalTensor<int32_t> ids_;
    kv::RowMover<T> mover_;
};

extern "C" __global__ __aicore__ void mla_fuse_b16(GM_ADDR nope, GM_ADDR rope, GM_ADDR blockIds, GM_ADDR fused,
                                                   KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    MlaFuse<uint16_t> op;
    op.Init(nope, rope, blockIds, fused, tiling, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void mla_fuse_b8(GM_ADDR nope, GM_ADDR rope, GM_ADDR blockIds, GM_ADDR fused,
                                                  KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    MlaFuse<uint8_t> op;
    op.Init(nope, rope, blockIds, fused, tiling, &pipe);
    op.Process();
}

void kv::LaunchMlaFuse(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* nope, uint8_t* rope,
                       uint8_t* blockIds, uint8_t* fused)
{
    if (elemBytes == 2) {
        KV_LAUNCH(mla_fuse_b16, t.usedCores, stream, nope, rope, blockIds, fused, t);
    } else {
        KV_LAUNCH(mla_fuse_b8, t.usedCores, stream, nope, rope, blockIds, fused, t);
    }
}
