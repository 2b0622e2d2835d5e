// nd_to_nz: NHD blocks [nb, block_size, heads * head_dim] -> FRACTAL_NZ [n, F, block_size, c0] with
// F = heads * head_dim / c0 and c0 * sizeof(T) = 32 bytes. A tile of token rows comes in whole; it leaves one
// fractal column per copy: the column's 32-byte piece of every row in the tile, gathered from UB, lands as one
// contiguous run of count x 32 bytes in the NZ block.
#include "kv_kernel_common.h"
#include "kv_launch.h"

template <typename T>
class NdToNz {
public:
    __aicore__ inline void Init(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR nz, const KvTiling& t, AscendC::TPipe* pipe)
    {
        t_ = t;
        blockElems_ = static_cast<uint64_t>(t.tokens) * t.srcRowElems;
        cache_.SetGlobalBuffer((__gm__ T*)cache, t.srcBlocks * blockElems_);
        nz_.SetGlobalBuffer((__gm__ T*)nz, t.dstBlocks * blockElems_);
        ids_.SetGlobalBuffer((__gm__ int32_t*)blockIds, t.numIds);
        pipe->InitBuffer(queue_, t.bufferNum, t.bufferBytes);
    }

    __aicore__ inline void Process()
    {
        const uint32_t rowElems = t_.srcRowElems;
        const uint32_t c0 = t_.copyElems;
        const uint32_t columns = t_.pieces;
        const uint64_t columnElems = static_cast<uint64_t>(t_.tokens) * c0;  // one fractal column of a block
        kv::CoreSpan span = kv::CoreIds(t_);
        for (uint32_t i = span.first; i < span.last; ++i) {
            uint64_t source = static_cast<uint64_t>(ids_.GetValue(i)) * blockElems_;
            uint64_t target = static_cast<uint64_t>(i) * blockElems_;
            for (uint32_t token = 0; token < t_.tokens; token += t_.tileTokens) {
                uint32_t count = t_.tokens - token < t_.tileTokens ? t_.tokens - token : t_.tileTokens;
                AscendC::LocalTensor<T> ub = queue_.template AllocTensor<T>();
                AscendC::DataCopy(ub, cache_[source + static_cast<uint64_t>(token) * rowElems], count * rowElems);
                queue_.EnQue(ub);
                ub = queue_.template DeQue<T>();
                // count one-block pieces, a row apart in UB (gap columns - 1), back to back in GM
                AscendC::DataCopyParams column(static_cast<uint16_t>(count), 1, static_cast<uint16_t>(columns - 1), 0);
                for (uint32_t f = 0; f < columns; ++f) {
                    AscendC::DataCopy(nz_[target + f * columnElems + static_cast<uint64_t>(token) * c0], ub[f * c0],
                                      column);
                }
                queue_.FreeTensor(ub);
            }
        }
    }

private:
    KvTiling t_;
    uint64_t blockElems_ = 0;
    AscendC::GlobalTensor<T> cache_, nz_;
    AscendC::GlobalTensor<int32_t> ids_;
    AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 2> queue_;
};

extern "C" __global__ __aicore__ void nd_to_nz_b16(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR nz, KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    NdToNz<uint16_t> op;
    op.Init(cache, blockIds, nz, tiling, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void nd_to_nz_b8(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR nz, KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    NdToNz<uint8_t> op;
    op.Init(cache, blockIds, nz, tiling, &pipe);
    op.Process();
}

void kv::LaunchNdToNz(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* cache, uint8_t* blockIds,
                      uint8_t* nz)
{
    if (elemBytes == 2) {
        KV_LAUNCH(nd_to_nz_b16, t.usedCores, stream, cache, blockIds, nz, t);
    } else {
        KV_LAUNCH(nd_to_nz_b8, t.usedCores, stream, cache, blockIds, nz, t);
    }
}
