// nz_to_nd: FRACTAL_NZ blocks [nb, F, block_size, c0] -> NHD [n, block_size, F * c0]. A tile of token rows comes
// in one fractal column per copy (count x 32 contiguous bytes of the NZ block, spread a row apart in UB), then
// the rows leave contiguously.
#include "kv_kernel_common.h"
#include "kv_launch.h"

template <typename T>
class NzToNd {
public:
    __aicore__ inline void Init(GM_ADDR nz, GM_ADDR blockIds, GM_ADDR cache, const KvTiling& t, AscendC::TPipe* pipe)
    {
        t_ = t;
        blockElems_ = static_cast<uint64_t>(t.tokens) * t.dstRowElems;
        nz_.SetGlobalBuffer((__gm__ T*)nz, t.srcBlocks * blockElems_);
        cache_.SetGlobalBuffer((__gm__ T*)cache, t.dstBlocks * blockElems_);
        ids_.SetGlobalBuffer((__gm__ int32_t*)blockIds, t.numIds);
        pipe->InitBuffer(queue_, t.bufferNum, t.bufferBytes);
    }

    __aicore__ inline void Process()
    {
        const uint32_t rowElems = t_.dstRowElems;
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
                // count one-block pieces, back to back in GM, a row apart in UB (gap columns - 1)
                AscendC::DataCopyParams column(static_cast<uint16_t>(count), 1, 0, static_cast<uint16_t>(columns - 1));
                for (uint32_t f = 0; f < columns; ++f) {
                    AscendC::DataCopy(ub[f * c0], nz_[source + f * columnElems + static_cast<uint64_t>(token) * c0],
                                      column);
                }
                queue_.EnQue(ub);
                ub = queue_.template DeQue<T>();
                AscendC::DataCopy(cache_[target + static_cast<uint64_t>(token) * rowElems], ub, count * rowElems);
                queue_.FreeTensor(ub);
            }
        }
    }

private:
    KvTiling t_;
    uint64_t blockElems_ = 0;
    AscendC::GlobalTensor<T> nz_, cache_;
    AscendC::GlobalTensor<int32_t> ids_;
    AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 2> queue_;
};

extern "C" __global__ __aicore__ void nz_to_nd_b16(GM_ADDR nz, GM_ADDR blockIds, GM_ADDR cache, KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    NzToNd<uint16_t> op;
    op.Init(nz, blockIds, cache, tiling, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void nz_to_nd_b8(GM_ADDR nz, GM_ADDR blockIds, GM_ADDR cache, KvTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    NzToNd<uint8_t> op;
    op.Init(nz, blockIds, cache, tiling, &pipe);
    op.Process();
}

void kv::LaunchNzToNd(const KvTiling& t, uint32_t elemBytes, void* stream, uint8_t* nz, uint8_t* blockIds,
                      uint8_t* cache)
{
    if (elemBytes == 2) {
        KV_LAUNCH(nz_to_nd_b16, t.usedCores, stream, nz, blockIds, cache, t);
    } else {
        KV_LAUNCH(nz_to_nd_b8, t.usedCores, stream, nz, blockIds, cache, t);
    }
}
