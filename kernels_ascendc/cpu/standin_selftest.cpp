// Small kernels that each break one hardware rule (and one that keeps them), to show what the stand-in catches.
// Usage: standin_selftest <case>; prints the violation and exits 0 when caught, prints "not caught" and exits 1
// otherwise.
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "kernel_operator.h"

using namespace AscendC;

namespace {

constexpr uint64_t ELEMS = 4096;
alignas(32) uint16_t gm[ELEMS];
alignas(32) uint16_t out[ELEMS];

struct Kernel {
    TPipe pipe;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 2> queue;
    GlobalTensor<uint16_t> src, dst;

    explicit Kernel(uint32_t buffers = 2, uint32_t bytes = 1024)
    {
        src.SetGlobalBuffer(gm, ELEMS);
        dst.SetGlobalBuffer(out, ELEMS);
        pipe.InitBuffer(queue, buffers, bytes);
    }
};

const std::map<std::string, std::function<void()>> CASES = {
    {"copy_out_without_dequeue", [] {
         Kernel k;
         LocalTensor<uint16_t> ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src, 256);
         DataCopy(k.dst, ub, 256);  // MTE3 may run before MTE2 finished
     }},
    {"alloc_more_than_initbuffer", [] {
         Kernel k(1);
         k.queue.AllocTensor<uint16_t>();
         k.queue.AllocTensor<uint16_t>();
     }},
    {"dequeue_empty_queue", [] {
         Kernel k;
         k.queue.DeQue<uint16_t>();
     }},
    {"block_count_over_4095", [] {
         Kernel k;
         LocalTensor<uint16_t> ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src, DataCopyParams(4096, 1, 0, 0));
     }},
    {"datacopy_unaligned_ub_address", [] {
         Kernel k;
         LocalTensor<uint16_t> ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub[8], k.src, 16);  // 16 bytes into the buffer
     }},
    {"datacopy_unaligned_gm_address", [] {
         Kernel k;
         LocalTensor<uint16_t> ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src[3], 16);
     }},
    {"read_back_without_barrier", [] {
         Kernel k;
         LocalTensor<uint16_t> ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src, 16);
         k.queue.EnQue(ub);
         ub = k.queue.DeQue<uint16_t>();
         DataCopy(k.dst, ub, 16);
         k.queue.FreeTensor(ub);
         LocalTensor<uint16_t> again = k.queue.AllocTensor<uint16_t>();
         DataCopy(again, k.dst, 16);  // reads what MTE3 just wrote
     }},
    {"read_back_after_barrier", [] {
         Kernel k;
         LocalTensor<uint16_t> ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src, 16);
         k.queue.EnQue(ub);
         ub = k.queue.DeQue<uint16_t>();
         DataCopy(k.dst, ub, 16);
         k.queue.FreeTensor(ub);
         PipeBarrier<PIPE_ALL>();
         LocalTensor<uint16_t> again = k.queue.AllocTensor<uint16_t>();
         DataCopy(again, k.dst, 16);
     }},
    {"pad_bytes_are_poisoned", [] {
         Kernel k;
         LocalTensor<uint16_t> ub = k.queue.AllocTensor<uint16_t>();
         DataCopyPad(ub, k.src, DataCopyExtParams(1, 6, 0, 0, 0), DataCopyPadExtParams<uint16_t>(false, 0, 0, 0));
         k.queue.EnQue(ub);
         ub = k.queue.DeQue<uint16_t>();
         DataCopy(k.dst, ub, 16);  // copies the 26 undefined bytes too
         if (out[3] == static_cast<uint16_t>(UB_POISON | (UB_POISON << 8))) {
             throw HardwareRuleViolation("UB padding left by DataCopyPad reached global memory as poison");
         }
     }},
};

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 2 || CASES.count(argv[1]) == 0) {
        std::fprintf(stderr, "usage: standin_selftest <case>; cases:");
        for (const auto& entry : CASES) {
            std::fprintf(stderr, " %s", entry.first.c_str());
        }
        std::fprintf(stderr, "\n");
        return 2;
    }
    try {
        standin::RunOnCores(1, CASES.at(argv[1]));
    } catch (const HardwareRuleViolation& caught) {
        std::printf("%s\n", caught.what());
        return 0;
    }
    std::printf("not caught\n");
    return 1;
}
