// mla_split: fused MLA blocks [nb, block_size, kv_lora_rank + rope_dim] -> contiguous nope
// [n, block_size, 1, kv_lora_rank] and rope [n, block_size, 1, rope_dim] for the listed blocks.
#include "kv_kernel_common.h"
#include "kv_launch.h"

template <typename T>
class MlaSplit {
public:
    __aicore__ inline void Init(GM_ADDR fused, GM_ADDR blockIds, GM_ADDR nope, GM_ADDR rope, const KvTiling& t,
                                AscendC::TPipe* pipe)
    {
        t_ = t;
        ropeElems_ = t.srcRowElems - t.copyElems;
        fused_.SetGlobalBuffer((__gm__ T*)fused, t.srcBlocks * t.tokens * t.srcRowElems);
        nope_.SetGlobalBuffer((__gm__ T*)nope, t.dstBlocks * t.tokens * t.copyElems);
        rope_.SetGlobalBuffer((__gm__ T*)rope, t.dstBlocks * t.tokens * ropeElems_);
        ids_.SetGlobalBuffer((__gm__ int32_t*)blockIds, t.numIds);
        mover_.Init(pipe, t);
    }

    __aicore__ inline void Process()
    {
        kv::CoreSpan span = kv::CoreIds(t_);
        for (uint32_t i = span.first; i < span.last; ++i) {
            uint64_t source = static_cast<uint64_t>(ids_.GetValue(i)) * t_.tokens * t_.srcRowElems;
            uint64_t target = static_cast<uint64_t>(i) * t_.tokens;
            mover_.Move(fused_[source], t_.srcRowElems, nope_[target * t_.copyElems], t_.copyElems, t_.tokens,
                        t_.copyElems);
            mover_.Move(fused_[source + t_.copyElems], t_.srcRowElems, rope_[target * ropeElems_], ropeElems_,
                        t_.tokens, ropeElems_);
        }
    }

private:
    KvTiling t_;
    uint32_t ropeElems_ = 0;
    AscendC::GlobalTensor<T> fused_, nope_, rope_;
    AscendC::GlobalTensor<int32_t> ids_;
    kv::RowMover<T> mover_;
};

extern "C" __global__ __aicore__ void mla_split_b16(GM_ADDR fused, GM_ADDR blockIds, GM_ADDR nope, GM_ADDR rope,
                                                    KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    MlaSplit<uint16_t> op;
    op.Init(fused, blockIds, nope, rope, tiling, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void mla_split_b8(GM_ADDR fused, GM_ADDR blockIds, GM_ADDR nope, GM_ADDR rope,
                                                   KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    MlaSplit<uint8_t> op;
    op.Init(fused, blockIds, nope, rope, tiling, &pipe);
    op.Process();
}

void kv::LaunchMlaSplit(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* fused, uint8_t* blockIds,
                        uint8_t* nope, uint8_t* rope)
{
    if (elemBytes == 2) {
        KV_LAUNCH(mla_split_b16, t.usedCores, stream, fused, blockIds, nope, rope, t);
    } else {
        KV_LAUNCH(mla_split_b8, t.usedCores, stream, fused, blockIds, nope, rope, t);
    }
}
