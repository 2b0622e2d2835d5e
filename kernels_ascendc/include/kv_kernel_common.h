// What the KV layout kernels share: the per-core share of the block list, launching, and row copies that pick
// DataCopy for 32-byte aligned rows and DataCopyPad otherwise.
#ifndef ASCEND_PD_KV_KERNEL_COMMON_H
#define ASCEND_PD_KV_KERNEL_COMMON_H

#include "kernel_operator.h"
#include "kv_tiling.h"

// KV_LAUNCH(kernel, blockDim, stream, args...) runs a kernel on blockDim vector cores:
//   - the CPU stand-in (cpu/kernel_operator.h) runs each core's share in turn;
//   - the toolkit's CPU debug mode (ASCENDC_CPU_DEBUG, tikicpulib) has no <<<>>>: ICPU_RUN_KF forks the cores,
//     and SetKernelMode(AIV_MODE) makes them vector cores, as the kernels declare;
//   - on the device, <<<blockDim, dynamic UB bytes (0: none), stream>>>.
#if defined(ASCEND_PD_CPU_STANDIN)
#define KV_LAUNCH(kernel, blockDim, stream, ...) \
    ((void)(stream), AscendC::standin::RunOnCores(blockDim, [&] { kernel(__VA_ARGS__); }))
#elif defined(ASCENDC_CPU_DEBUG)
#include "tikicpulib.h"
#define KV_LAUNCH(kernel, blockDim, stream, ...)           \
    do {                                                   \
        (void)(stream);                                    \
        AscendC::SetKernelMode(KernelMode::AIV_MODE);      \
        ICPU_RUN_KF(kernel, blockDim, __VA_ARGS__);        \
    } while (0)
#else
#define KV_LAUNCH(kernel, blockDim, stream, ...) kernel<<<blockDim, 0, stream>>>(__VA_ARGS__)
#endif

namespace kv {

using AscendC::GlobalTensor;
using AscendC::LocalTensor;

constexpr uint32_t UB_BLOCK = 32;

struct CoreSpan {
    uint32_t first;
    uint32_t last;
};

__aicore__ inline CoreSpan CoreIds(const KvTiling& t)
{
    uint32_t first = static_cast<uint32_t>(AscendC::GetBlockIdx()) * t.idsPerCore;
    uint32_t last = first + t.idsPerCore < t.numIds ? first + t.idsPerCore : t.numIds;
    return {first < last ? first : last, last};
}

// Row length in UB: rows start on 32-byte boundaries.
template <typename T>
__aicore__ inline uint32_t UbPitch(uint32_t elems)
{
    return (elems * sizeof(T) + UB_BLOCK - 1) / UB_BLOCK * UB_BLOCK / sizeof(T);
}

// GM -> UB: `rows` rows of `elems`, `gmStride` elements apart in GM, landing `ubPitch` elements apart in UB.
template <typename T>
__aicore__ inline void RowsIn(const LocalTensor<T>& ub, const GlobalTensor<T>& gm, uint32_t rows, uint32_t elems,
                              uint32_t gmStride, uint32_t ubPitch, bool aligned)
{
    if (aligned) {
        AscendC::DataCopyParams p(static_cast<uint16_t>(rows), static_cast<uint16_t>(elems * sizeof(T) / UB_BLOCK),
                                  static_cast<uint16_t>((gmStride - elems) * sizeof(T) / UB_BLOCK),
                                  static_cast<uint16_t>((ubPitch - elems) * sizeof(T) / UB_BLOCK));
        AscendC::DataCopy(ub, gm, p);
    } else {
        AscendC::DataCopyExtParams p(static_cast<uint16_t>(rows), elems * sizeof(T), (gmStride - elems) * sizeof(T),
                                     (ubPitch - UbPitch<T>(elems)) * sizeof(T) / UB_BLOCK, 0);
        AscendC::DataCopyPad(ub, gm, p, AscendC::DataCopyPadExtParams<T>(false, 0, 0, 0));
    }
}

// UB -> GM: the reverse of RowsIn.
template <typename T>
__aicore__ inline void RowsOut(const GlobalTensor<T>& gm, const LocalTensor<T>& ub, uint32_t rows, uint32_t elems,
                               uint32_t gmStride, uint32_t ubPitch, bool aligned)
{
    if (aligned) {
        AscendC::DataCopyParams p(static_cast<uint16_t>(rows), static_cast<uint16_t>(elems * sizeof(T) / UB_BLOCK),
                                  static_cast<uint16_t>((ubPitch - elems) * sizeof(T) / UB_BLOCK),
                                  static_cast<uint16_t>((gmStride - elems) * sizeof(T) / UB_BLOCK));
        AscendC::DataCopy(gm, ub, p);
    } else {
        AscendC::DataCopyExtParams p(static_cast<uint16_t>(rows), elems * sizeof(T),
                                     (ubPitch - UbPitch<T>(elems)) * sizeof(T) / UB_BLOCK,
                                     (gmStride - elems) * sizeof(T), 0);
        AscendC::DataCopyPad(gm, ub, p);
    }
}

// Moves strided rows GM -> UB -> GM in tiles of tileTokens rows through a double-buffered queue.
template <typename T>
class RowMover {
public:
    __aicore__ inline void Init(AscendC::TPipe* pipe, const KvTiling& t)
    {
        tileTokens_ = t.tileTokens;
        aligned_ = t.aligned != 0;
        pipe->InitBuffer(queue_, t.bufferNum, t.bufferBytes);
    }

    __aicore__ inline void Move(const GlobalTensor<T>& src, uint32_t srcStride, const GlobalTensor<T>& dst,
                                uint32_t dstStride, uint32_t rows, uint32_t elems)
    {
        const uint32_t pitch = UbPitch<T>(elems);
        for (uint32_t row = 0; row < rows; row += tileTokens_) {
            uint32_t count = rows - row < tileTokens_ ? rows - row : tileTokens_;
            LocalTensor<T> ub = queue_.template AllocTensor<T>();
            RowsIn(ub, src[static_cast<uint64_t>(row) * srcStride], count, elems, srcStride, pitch, aligned_);
            queue_.EnQue(ub);
            ub = queue_.template DeQue<T>();
            RowsOut(dst[static_cast<uint64_t>(row) * dstStride], ub, count, elems, dstStride, pitch, aligned_);
            queue_.FreeTensor(ub);
        }
    }

    AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 2> queue_;

private:
    uint32_t tileTokens_ = 0;
    bool aligned_ = false;
};

}  // namespace kv

#endif
