// nd_to_nz: NHD blocks [nb, block_size, heads * head_dim] -> FRACTAL_NZ [n, F, block_size, c0] with
// F = heads * head_dim / c0 and c0 * sizeof(T) = 32 bytes: token rows come in whole, and each row leaves as F
// one-block bursts that are block_size blocks apart in the NZ block.
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
        // one burst per fractal column; consecutive columns of a token are block_size fractal rows apart
        AscendC::DataCopyParams scatterRow(static_cast<uint16_t>(t_.pieces), 1, 0,
                                           static_cast<uint16_t>(t_.tokens - 1));
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
                for (uint32_t row = 0; row < count; ++row) {
                    AscendC::DataCopy(nz_[target + static_cast<uint64_t>(token + row) * c0], ub[row * rowElems],
                                      scatterRow);
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
    AscendC::TPipe pipe;
    NdToNz<uint16_t> op;
    op.Init(cache, blockIds, nz, tiling, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void nd_to_nz_b8(GM_ADDR cache, GM_ADDR blockIds, GM_ADDR nz, KvTiling tiling)
{
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
