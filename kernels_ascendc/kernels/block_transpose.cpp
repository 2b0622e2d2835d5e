// block_transpose: in place, per listed block, [split, block_size, heads/split, head_dim] (whole blocks of
// `split` senders read one after another) -> [block_size, heads, head_dim]. A block that fits in UB is staged
// whole (one read, one write); a larger one is first copied to this core's GM workspace, then written back
// piece by piece.
#include "kv_kernel_common.h"
#include "kv_launch.h"

template <typename T>
class BlockTranspose {
public:
    __aicore__ inline void Init(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR workspace, const KvTiling& t,
                                AscendC::TPipe* pipe)
    {
        t_ = t;
        blockElems_ = static_cast<uint64_t>(t.tokens) * t.srcRowElems;
        cache_.SetGlobalBuffer((__gm__ T*)cache, t.srcBlocks * blockElems_);
        workspace_.SetGlobalBuffer((__gm__ T*)workspace, t.dstBlocks * blockElems_);
        ids_.SetGlobalBuffer((__gm__ int32_t*)blockIds, t.numIds);
        mover_.Init(pipe, t);
    }

    __aicore__ inline void Process()
    {
        kv::CoreSpan span = kv::CoreIds(t_);
        for (uint32_t i = span.first; i < span.last; ++i) {
            uint64_t base = static_cast<uint64_t>(ids_.GetValue(i)) * blockElems_;
            if (t_.fullLoad) {
                StagedInUb(base);
            } else {
                ThroughWorkspace(base);
            }
        }
    }

private:
    // Piece s lands at UB column s of every token row, so the UB holds the block already transposed.
    __aicore__ inline void StagedInUb(uint64_t base)
    {
        const uint32_t piece = t_.copyElems;
        const uint32_t pitch = kv::UbPitch<T>(piece);
        const bool aligned = t_.aligned != 0;
        AscendC::LocalTensor<T> ub = mover_.queue_.template AllocTensor<T>();
        for (uint32_t s = 0; s < t_.pieces; ++s) {
            kv::RowsIn(ub[s * pitch], cache_[base + static_cast<uint64_t>(s) * t_.tokens * piece], t_.tokens, piece,
                       piece, t_.pieces * pitch, aligned);
        }
        mover_.queue_.EnQue(ub);
        ub = mover_.queue_.template DeQue<T>();
        kv::RowsOut(cache_[base], ub, t_.tokens * t_.pieces, piece, piece, pitch, aligned);
        mover_.queue_.FreeTensor(ub);
    }

    __aicore__ inline void ThroughWorkspace(uint64_t base)
    {
        const uint32_t piece = t_.copyElems;
        AscendC::GlobalTensor<T> staging = workspace_[AscendC::GetBlockIdx() * blockElems_];
        mover_.Move(cache_[base], t_.srcRowElems, staging, t_.srcRowElems, t_.tokens, t_.srcRowElems);
        AscendC::PipeBarrier<PIPE_ALL>();  // the workspace writes must land before they are read back
        for (uint32_t s = 0; s < t_.pieces; ++s) {
            mover_.Move(staging[static_cast<uint64_t>(s) * t_.tokens * piece], piece,
                        cache_[base + static_cast<uint64_t>(s) * piece], t_.srcRowElems, t_.tokens, piece);
        }
        AscendC::PipeBarrier<PIPE_ALL>();  // the next block overwrites the workspace
    }

    KvTiling t_;
    uint64_t blockElems_ = 0;
    AscendC::GlobalTensor<T> cache_, workspace_;
    AscendC::GlobalTensor<int32_t> ids_;
    kv::RowMover<T> mover_;
};

extern "C" __global__ __aicore__ void block_transpose_b16(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR workspace,
                                                          KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    BlockTranspose<uint16_t> op;
    op.Init(cache, blockIds, workspace, tiling, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void block_transpose_b8(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR workspace,
                                                         KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    BlockTranspose<uint8_t> op;
    op.Init(cache, blockIds, workspace, tiling, &pipe);
    op.Process();
}

void kv::LaunchBlockTranspose(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* cache,
                              uint8_t* blockIds, uint8_t* workspace)
{
    if (elemBytes == 2) {
        KV_LAUNCH(block_transpose_b16, t.usedCores, stream, cache, blockIds, workspace, t);
    } else {
        KV_LAUNCH(block_transpose_b8, t.usedCores, stream, cache, blockIds, workspace, t);
    }
}
