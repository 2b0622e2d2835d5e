// Small kernels that each break one hardware rule (and some that keep them), to show what the stand-in catches.
// Usage: standin_selftest <case>; prints the violation and exits 0 when caught, prints "not caught" and exits 1
// otherwise (3: the case itself found the stand-in wrong).
// The static_asserts pin the stand-in's signatures to the real ones (include/basic_api/kernel_tpipe.h,
// kernel_tensor.h): a drift fails the build.
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "kernel_operator.h"

using namespace AscendC;

namespace {

using Que = TQueBind<TPosition::VECIN, TPosition::VECOUT, 2>;
using Tensor = LocalTensor<uint16_t>;

// --- signatures ---------------------------------------------------------------------------------------------------
static_assert(std::is_same_v<Que, TQueBind<TPosition::VECIN, TPosition::VECOUT, 2, 0>>, "TQueBind has a mask");
static_assert(std::is_base_of_v<TQueBind<TPosition::VECIN, TPosition::VECIN, 2, 0>, TQue<TPosition::VECIN, 2>>,
              "TQue derives from TQueBind");
static_assert(std::is_same_v<decltype(&TPipe::InitBuffer<Que>), bool (TPipe::*)(Que&, uint8_t, uint32_t)>,
              "bool InitBuffer(que, uint8_t num, uint32_t len)");
static_assert(std::is_same_v<decltype(&Que::EnQue<uint16_t>), bool (Que::*)(const Tensor&)>, "bool EnQue");
static_assert(std::is_same_v<decltype(&Que::FreeTensor<uint16_t>), void (Que::*)(Tensor&)>, "FreeTensor(Tensor&)");

template <typename Q, typename = void>
struct FreesConstTensor : std::false_type {};
template <typename Q>
struct FreesConstTensor<Q, std::void_t<decltype(std::declval<Q&>().FreeTensor(std::declval<const Tensor&>()))>>
    : std::true_type {};
static_assert(!FreesConstTensor<Que>::value, "FreeTensor takes a non-const LocalTensor&");
static_assert(std::is_same_v<decltype(std::declval<const GlobalTensor<uint16_t>&>().GetPhyAddr()), const uint16_t*>,
              "GetPhyAddr() returns a const __gm__ pointer");
static_assert(std::is_same_v<decltype(DataCopyParams::blockLen), uint16_t> &&
                  std::is_same_v<decltype(DataCopyExtParams::blockLen), uint32_t>,
              "DataCopy parameter widths");

// --- cases --------------------------------------------------------------------------------------------------------
constexpr uint64_t ELEMS = 4096;
alignas(32) uint16_t gm[ELEMS];
alignas(32) uint16_t out[ELEMS];
alignas(32) uint8_t bytes[2 * ELEMS + 2];

struct Kernel {
    TPipe pipe;
    Que queue;
    GlobalTensor<uint16_t> src, dst;

    explicit Kernel(uint8_t buffers = 2, uint32_t len = 1024)
    {
        src.SetGlobalBuffer(gm, ELEMS);
        dst.SetGlobalBuffer(out, ELEMS);
        pipe.InitBuffer(queue, buffers, len);
    }

    // MTE3 writes 16 elements of out, then the tensor goes back to the queue.
    void WriteOut()
    {
        Tensor ub = queue.AllocTensor<uint16_t>();
        DataCopy(ub, src, 16);
        queue.EnQue(ub);
        ub = queue.DeQue<uint16_t>();
        DataCopy(dst, ub, 16);
        queue.FreeTensor(ub);
    }

    // MTE2 reads back what WriteOut wrote.
    void ReadBack()
    {
        Tensor again = queue.AllocTensor<uint16_t>();
        DataCopy(again, dst, 16);
    }
};

const std::map<std::string, std::function<void()>> CASES = {
    {"copy_out_without_dequeue", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
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
    {"more_than_64_buffers_in_one_pipe", [] {
         Kernel k(40, 32);
         Que second;
         k.pipe.InitBuffer(second, 40, 32);  // 80 buffers: UB has room, the pipe's buffer table does not
     }},
    {"block_count_over_4095", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src, DataCopyParams(4096, 1, 0, 0));
     }},
    {"zero_length_copies_are_no_ops", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src, DataCopyParams(0, 1, 0, 0));
         DataCopy(ub, k.src, DataCopyParams(1, 0, 0, 0));
         DataCopyPad(ub, k.src, DataCopyExtParams(1, 0, 0, 0, 0), DataCopyPadExtParams<uint16_t>());
     }},
    {"datacopy_unaligned_ub_address", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub[8], k.src, 16);  // 16 bytes into the buffer
     }},
    {"datacopy_length_not_whole_blocks", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src, 24);  // 48 bytes: the hardware would move 32 and drop 16
     }},
    {"datacopy_gm_address_not_element_aligned", [] {
         Kernel k;
         GlobalTensor<uint16_t> odd;
         odd.SetGlobalBuffer(reinterpret_cast<uint16_t*>(bytes + 1), ELEMS);
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, odd, 16);
     }},
    {"datacopy_gm_address_element_aligned", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopy(ub, k.src[3], 16);  // 6 bytes past a 32-byte boundary: allowed by the API
     }},
    {"read_back_without_barrier", [] {
         Kernel k;
         k.WriteOut();
         k.ReadBack();
     }},
    {"read_back_after_mte3_barrier", [] {
         Kernel k;
         k.WriteOut();
         PipeBarrier<PIPE_MTE3>();  // orders MTE3 against MTE3 only
         k.ReadBack();
     }},
    {"read_back_after_mte2_barrier", [] {
         Kernel k;
         k.WriteOut();
         PipeBarrier<PIPE_MTE2>();
         k.ReadBack();
     }},
    {"read_back_after_pipe_all_barrier", [] {
         Kernel k;
         k.WriteOut();
         PipeBarrier<PIPE_ALL>();
         k.ReadBack();
     }},
    {"read_back_after_mte3_mte2_flag", [] {
         Kernel k;
         k.WriteOut();
         SetFlag<HardEvent::MTE3_MTE2>(0);
         WaitFlag<HardEvent::MTE3_MTE2>(0);
         k.ReadBack();
     }},
    {"read_back_with_flag_set_before_the_write", [] {
         Kernel k;
         SetFlag<HardEvent::MTE3_MTE2>(0);
         k.WriteOut();
         WaitFlag<HardEvent::MTE3_MTE2>(0);
         k.ReadBack();
     }},
    {"read_back_after_a_flag_of_another_event", [] {
         Kernel k;
         k.WriteOut();
         SetFlag<HardEvent::MTE2_MTE3>(0);
         WaitFlag<HardEvent::MTE2_MTE3>(0);
         k.ReadBack();
     }},
    {"wait_flag_without_set_flag", [] {
         Kernel k;
         k.WriteOut();
         WaitFlag<HardEvent::MTE3_MTE2>(0);
     }},
    {"wait_flag_on_another_id", [] {
         SetFlag<HardEvent::MTE3_MTE2>(0);
         WaitFlag<HardEvent::MTE3_MTE2>(1);
     }},
    {"pad_bytes_are_poisoned", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopyPad(ub, k.src, DataCopyExtParams(1, 6, 0, 0, 0), DataCopyPadExtParams<uint16_t>(false, 0, 0, 0));
         k.queue.EnQue(ub);
         ub = k.queue.DeQue<uint16_t>();
         DataCopy(k.dst, ub, 16);  // copies the 26 undefined bytes too
         if (out[3] == static_cast<uint16_t>(UB_POISON | (UB_POISON << 8))) {
             throw HardwareRuleViolation("UB padding left by DataCopyPad reached global memory as poison");
         }
     }},
    {"pad_value_fills_the_padding", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         gm[0] = 11;
         DataCopyPad(ub, k.src, DataCopyExtParams(1, 2, 0, 0, 0), DataCopyPadExtParams<uint16_t>(true, 1, 2, 7));
         const uint16_t* lane = reinterpret_cast<const uint16_t*>(ub.Bytes());
         if (lane[0] != 7 || lane[1] != 11 || lane[2] != 7 || lane[3] != 7) {
             throw std::logic_error("DataCopyPad did not place paddingValue around the burst");
         }
     }},
    {"padding_wider_than_32_bytes", [] {
         Kernel k;
         Tensor ub = k.queue.AllocTensor<uint16_t>();
         DataCopyPad(ub, k.src, DataCopyExtParams(1, 2, 0, 0, 0), DataCopyPadExtParams<uint16_t>(true, 0, 17, 7));
     }},
};

// Kernels that leave out KERNEL_TASK_TYPE_DEFAULT; every other case declares it like the real kernels do.
const std::map<std::string, std::function<void()>> UNTYPED = {
    {"kernel_without_type", [] { Kernel k; }},
};

}  // namespace

int main(int argc, char** argv)
{
    const std::string name = argc == 2 ? argv[1] : "";
    if (CASES.count(name) == 0 && UNTYPED.count(name) == 0) {
        std::fprintf(stderr, "usage: standin_selftest <case>; cases:");
        for (const auto& entry : CASES) {
            std::fprintf(stderr, " %s", entry.first.c_str());
        }
        for (const auto& entry : UNTYPED) {
            std::fprintf(stderr, " %s", entry.first.c_str());
        }
        std::fprintf(stderr, "\n");
        return 2;
    }
    try {
        if (UNTYPED.count(name)) {
            standin::RunOnCores(1, UNTYPED.at(name));
        } else {
            standin::RunOnCores(1, [&] {
                KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
                CASES.at(name)();
            });
        }
    } catch (const HardwareRuleViolation& caught) {
        std::printf("%s\n", caught.what());
        return 0;
    } catch (const std::logic_error& wrong) {
        std::printf("stand-in wrong: %s\n", wrong.what());
        return 3;
    }
    std::printf("not caught\n");
    return 1;
}
