// CPU stand-in for the subset of the AscendC API the KV kernels use. A test harness, not an execution target:
// it runs each core's work in turn on the host and throws HardwareRuleViolation where an Ascend vector core
// (Atlas A2/A3, __NPU_ARCH__ 2201) would reject the program, hang, or silently compute garbage.
//
// Signatures follow the public asc-devkit headers (tag v9.0.1 and master 82b89a1, which agree on every signature
// used here); each section below names the header it follows. The stand-in is never looser than the hardware:
//   - unified buffer (UB) overflow: TPipe::InitBuffer beyond 192 KiB per core, or more than 64 buffers per pipe
//   - DataCopy with a UB address or a length that is not a multiple of 32 bytes (the hardware rounds a length down
//     and drops the tail), or a GM address that is not element aligned
//   - DataCopy/DataCopyPad parameters outside the ranges of their fields (blockCount, blockLen, strides, padding)
//   - global-memory accesses outside the buffer given to SetGlobalBuffer
//   - queue misuse: copying out of a tensor that was not EnQue'd and DeQue'd, allocating more buffers than
//     InitBuffer made, DeQue from an empty queue
//   - reading global memory this core wrote through MTE3 with nothing in between that orders MTE3 before MTE2:
//     only PipeBarrier<PIPE_ALL>() or SetFlag/WaitFlag<HardEvent::MTE3_MTE2> (set after the write) do
//   - WaitFlag without a SetFlag of the same event and id before it (the core would wait forever)
//   - a kernel that does not declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY): the launch's blockDim counts
//     vector cores only for vector-only kernels
//   - two cores touching the same global bytes where one of them writes (a race between cores)
// Padding bytes DataCopyPad leaves in UB and fresh UB are filled with a poison pattern, so a kernel that
// copies them out produces visibly wrong results (the hardware fills them with dummy data).
//
// Where the real API allows more than the stand-in models, the stand-in says so next to the rule:
//   - zero-length copies (blockCount or blockLen 0) are no-ops, as documented for A2/A3;
//   - GM addresses need element alignment only (the API reference); the kernels' tiling still prefers 32 bytes;
//   - DataCopyPad padding (isPad, leftPadding, rightPadding, paddingValue) is modelled; SetPadValue is not.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// Function qualifiers and GM_ADDR: empty on the host, as in the toolkit's CPU debug mode (kernel_operator.h).
#define __aicore__
#define __global__
#define __gm__
using GM_ADDR = uint8_t*;

// impl/basic_api/utils/kernel_utils_macros.h: the kernel's core type, declared inside the kernel body.
enum KernelMetaType : uint8_t { KERNEL_TYPE_AIV_ONLY, KERNEL_TYPE_AIC_ONLY, KERNEL_TYPE_MIX_AIC_1_2 };
#define KERNEL_TASK_TYPE_DEFAULT(value) (AscendC::standin::Core().kernelType = static_cast<int>(value))

// The pipes of a core (a compiler builtin on the device; stub_def.h in the toolkit's CPU debug mode).
enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };

namespace AscendC {

// impl/basic_api/utils/kernel_utils_constants.h (arch 2201) and impl/basic_api/kernel_macros.h (QBUF_MAX_LEN).
constexpr uint32_t ONE_BLK_SIZE = 32;             // bytes in one UB data block
constexpr uint32_t TOTAL_UB_SIZE = 192 * 1024;    // UB bytes per vector core on __NPU_ARCH__ 2201
constexpr uint32_t QBUF_MAX_LEN = 64;             // queue buffers one TPipe can hand out
constexpr uint32_t MAX_BLOCK_COUNT = 4095;        // DataCopy / DataCopyPad blockCount upper bound
constexpr uint32_t MAX_DATACOPY_BLOCK_LEN = 65535;     // DataCopyParams.blockLen, in 32-byte blocks
constexpr uint32_t MAX_DATACOPYPAD_BLOCK_LEN = 2097151;  // DataCopyExtParams.blockLen, in bytes (21 bits)
constexpr uint8_t UB_POISON = 0xA5;

struct HardwareRuleViolation : std::runtime_error {
    using std::runtime_error::runtime_error;
};

namespace standin {

struct ByteRange {
    uintptr_t begin;
    uintptr_t end;
};

struct PendingWrite {
    ByteRange range;
    uint64_t seq;  // issue order, so a flag orders only the writes issued before its SetFlag
};

struct CoreState {
    int64_t blockIdx = 0;
    int64_t blockNum = 1;
    int kernelType = -1;
    std::vector<uint8_t> ub;
    uint64_t writeSeq = 0;
    std::vector<PendingWrite> unfencedWrites;  // GM bytes written by MTE3 and not yet ordered before MTE2
    std::map<std::pair<int, int32_t>, uint64_t> setFlags;  // (event, id) -> writeSeq at SetFlag
    std::vector<ByteRange> reads;              // every GM byte range this core read
    std::vector<ByteRange> writes;             // every GM byte range this core wrote
};

inline CoreState& Core()
{
    static CoreState state;
    return state;
}

[[noreturn]] inline void Violation(const std::string& what)
{
    std::ostringstream message;
    message << "core " << Core().blockIdx << ": " << what;
    throw HardwareRuleViolation(message.str());
}

inline bool Overlaps(const ByteRange& a, const ByteRange& b) { return a.begin < b.end && b.begin < a.end; }

inline std::vector<ByteRange> Merged(std::vector<ByteRange> ranges)
{
    std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
    std::vector<ByteRange> merged;
    for (const ByteRange& r : ranges) {
        if (!merged.empty() && r.begin <= merged.back().end) {
            merged.back().end = std::max(merged.back().end, r.end);
        } else {
            merged.push_back(r);
        }
    }
    return merged;
}

inline bool AnyOverlap(const std::vector<ByteRange>& a, const std::vector<ByteRange>& b)
{
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (Overlaps(a[i], b[j])) {
            return true;
        }
        (a[i].end <= b[j].begin) ? ++i : ++j;
    }
    return false;
}

inline void RecordRead(const void* p, uint64_t bytes)
{
    ByteRange r{reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes};
    for (const PendingWrite& w : Core().unfencedWrites) {
        if (Overlaps(r, w.range)) {
            Violation("DataCopy reads global memory this core wrote without a barrier in between "
                      "(add PipeBarrier<PIPE_ALL>() or SetFlag/WaitFlag<HardEvent::MTE3_MTE2> after the write)");
        }
    }
    Core().reads.push_back(r);
}

inline void RecordWrite(const void* p, uint64_t bytes)
{
    ByteRange r{reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes};
    Core().unfencedWrites.push_back(PendingWrite{r, Core().writeSeq++});
    Core().writes.push_back(r);
}

// Runs the kernel once per core, as the NPU would on blockDim cores, then checks the cores did not race.
template <typename Kernel>
void RunOnCores(uint32_t blockDim, Kernel&& kernel)
{
    std::vector<std::vector<ByteRange>> reads(blockDim), writes(blockDim);
    for (uint32_t core = 0; core < blockDim; ++core) {
        CoreState& state = Core();
        state = CoreState{};
        state.blockIdx = core;
        state.blockNum = blockDim;
        state.ub.assign(TOTAL_UB_SIZE, UB_POISON);
        kernel();
        if (state.kernelType != KERNEL_TYPE_AIV_ONLY) {
            Violation("the kernel does not declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY): launched as a "
                      "mixed kernel, blockDim would count AI cores, not the vector cores the tiling planned for");
        }
        reads[core] = Merged(state.reads);
        writes[core] = Merged(state.writes);
    }
    for (uint32_t a = 0; a < blockDim; ++a) {
        for (uint32_t b = 0; b < blockDim; ++b) {
            if (a != b && (AnyOverlap(writes[a], reads[b]) || (a < b && AnyOverlap(writes[a], writes[b])))) {
                std::ostringstream message;
                message << "cores " << a << " and " << b << " race on the same global memory (one of them writes it)";
                throw HardwareRuleViolation(message.str());
            }
        }
    }
}

}  // namespace standin

// --- include/basic_api/kernel_operator_sys_var_intf.h --------------------------------------------------------------
inline int64_t GetBlockIdx() { return standin::Core().blockIdx; }
inline int64_t GetBlockNum() { return standin::Core().blockNum; }

// --- impl/basic_api/common_types.h, impl/basic_api/kernel_event.h (the members the kernels use) -------------------
enum class TPosition : uint8_t { GM, VECIN = 9, VECOUT, VECCALC };
enum class HardEvent : uint8_t { MTE2_V = 4, V_MTE2, MTE3_V, V_MTE3, MTE3_MTE2 = 19, MTE2_MTE3, S_MTE2 = 23, MTE2_S };

// --- include/basic_api/kernel_operator_block_sync_intf.h ----------------------------------------------------------
// A barrier on one pipe orders only that pipe's own instructions: MTE3 writes reach GM before a later MTE2 read
// only after PIPE_ALL.
template <pipe_t pipe>
inline void PipeBarrier()
{
    if (pipe == PIPE_ALL) {
        standin::Core().unfencedWrites.clear();
    }
}

template <HardEvent event>
inline void SetFlag(int32_t eventID)
{
    standin::Core().setFlags[{static_cast<int>(event), eventID}] = standin::Core().writeSeq;
}

template <HardEvent event>
inline void WaitFlag(int32_t eventID)
{
    auto& flags = standin::Core().setFlags;
    auto flag = flags.find({static_cast<int>(event), eventID});
    if (flag == flags.end()) {
        standin::Violation("WaitFlag without a SetFlag of the same event and id before it: the core waits forever");
    }
    const uint64_t before = flag->second;
    flags.erase(flag);
    if (event == HardEvent::MTE3_MTE2) {  // orders the MTE3 writes issued before the SetFlag, not later ones
        auto& pending = standin::Core().unfencedWrites;
        pending.erase(std::remove_if(pending.begin(), pending.end(),
                                     [before](const standin::PendingWrite& w) { return w.seq < before; }),
                      pending.end());
    }
}

// --- include/basic_api/kernel_tensor.h: GlobalTensor --------------------------------------------------------------
template <typename T>
class GlobalTensor {
public:
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize)
    {
        base_ = buffer;
        size_ = bufferSize;
    }

    GlobalTensor operator[](uint64_t offset) const
    {
        if (offset > size_) {
            standin::Violation("global tensor offset " + std::to_string(offset) + " is outside the " +
                               std::to_string(size_) + "-element buffer given to SetGlobalBuffer");
        }
        GlobalTensor view;
        view.base_ = base_ + offset;
        view.size_ = size_ - offset;
        return view;
    }

    T GetValue(uint64_t offset) const
    {
        CheckRange(offset, 1);
        standin::RecordRead(base_ + offset, sizeof(T));
        return base_[offset];
    }

    const __gm__ T* GetPhyAddr() const { return base_; }
    __gm__ T* GetPhyAddr(uint64_t offset) const { return base_ + offset; }
    uint64_t GetSize() const { return size_; }

    // Stand-in only: element range [offset, offset + count) must lie inside the buffer.
    void CheckRange(uint64_t offset, uint64_t count) const
    {
        if (offset + count > size_) {
            std::ostringstream message;
            message << "global memory access [" << offset << ", " << offset + count << ") elements is outside the "
                    << size_ << "-element buffer given to SetGlobalBuffer";
            standin::Violation(message.str());
        }
    }

private:
    __gm__ T* base_ = nullptr;
    uint64_t size_ = 0;
};

// --- unified buffer, queues and tensors ---------------------------------------------------------------------------
namespace standin {
enum class SlotState { Free, Allocated, Queued, Dequeued, Calc };
struct BufferSlot {
    uint32_t ubOffset = 0;
    uint32_t bytes = 0;
    SlotState state = SlotState::Free;
};
}  // namespace standin

// include/basic_api/kernel_tensor.h: LocalTensor
template <typename T>
class LocalTensor {
public:
    LocalTensor() = default;
    LocalTensor(standin::BufferSlot* slot, uint32_t offsetBytes) : slot_(slot), offsetBytes_(offsetBytes) {}

    LocalTensor operator[](uint32_t offset) const
    {
        return LocalTensor(slot_, offsetBytes_ + offset * static_cast<uint32_t>(sizeof(T)));
    }

    uint32_t GetSize() const { return (slot_->bytes - offsetBytes_) / sizeof(T); }

    // Stand-in only: where the tensor lives in the core's UB.
    standin::BufferSlot* Slot() const { return slot_; }
    uint32_t UbAddress() const { return slot_->ubOffset + offsetBytes_; }
    uint8_t* Bytes() const { return standin::Core().ub.data() + UbAddress(); }

    // The UB bytes [offset, offset + bytes) of this tensor must lie inside its buffer.
    void CheckRange(uint64_t offsetBytes, uint64_t bytes) const
    {
        if (offsetBytes_ + offsetBytes + bytes > slot_->bytes) {
            std::ostringstream message;
            message << "UB access of " << bytes << " bytes at byte " << offsetBytes_ + offsetBytes
                    << " overruns its " << slot_->bytes << "-byte queue buffer";
            standin::Violation(message.str());
        }
    }

private:
    standin::BufferSlot* slot_ = nullptr;
    uint32_t offsetBytes_ = 0;
};

// include/basic_api/kernel_tpipe.h: TQueBind<src, dst, depth, mask>, and TQue derived from it.
template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind {
public:
    template <typename T>
    LocalTensor<T> AllocTensor()
    {
        for (standin::BufferSlot& slot : slots_) {
            if (slot.state == standin::SlotState::Free) {
                slot.state = standin::SlotState::Allocated;
                return LocalTensor<T>(&slot, 0);
            }
        }
        standin::Violation("AllocTensor: all " + std::to_string(slots_.size()) +
                           " buffers of the queue are in use (FreeTensor missing, or InitBuffer made too few)");
    }

    template <typename T>
    bool EnQue(const LocalTensor<T>& tensor)
    {
        if (tensor.Slot()->state != standin::SlotState::Allocated) {
            standin::Violation("EnQue of a tensor that was not allocated from this queue");
        }
        tensor.Slot()->state = standin::SlotState::Queued;
        queued_.push_back(tensor.Slot());
        return true;
    }

    template <typename T>
    LocalTensor<T> DeQue()
    {
        if (queued_.empty()) {
            standin::Violation("DeQue from an empty queue");
        }
        standin::BufferSlot* slot = queued_.front();
        queued_.pop_front();
        slot->state = standin::SlotState::Dequeued;
        return LocalTensor<T>(slot, 0);
    }

    template <typename T>
    void FreeTensor(LocalTensor<T>& tensor)
    {
        if (tensor.Slot()->state == standin::SlotState::Free || tensor.Slot()->state == standin::SlotState::Queued) {
            standin::Violation("FreeTensor of a buffer that is free or still queued");
        }
        tensor.Slot()->state = standin::SlotState::Free;
    }

    std::vector<standin::BufferSlot> slots_;  // stand-in only: filled by TPipe::InitBuffer

private:
    std::deque<standin::BufferSlot*> queued_;
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<pos, pos, depth, mask> {};

// include/basic_api/kernel_tpipe.h: TPipe::InitBuffer(que, uint8_t num, uint32_t len) -> bool. num is 1..64 and the
// pipe hands out at most QBUF_MAX_LEN buffers in all (impl/basic_api/kernel_tpipe_impl.h).
class TPipe {
public:
    template <class Que>
    bool InitBuffer(Que& que, uint8_t num, uint32_t len)
    {
        uint32_t bytes = (len + ONE_BLK_SIZE - 1) / ONE_BLK_SIZE * ONE_BLK_SIZE;
        if (num == 0 || len == 0) {
            standin::Violation("InitBuffer with no buffers or zero length");
        }
        if (buffers_ + num > QBUF_MAX_LEN) {
            standin::Violation("InitBuffer: " + std::to_string(buffers_ + num) + " buffers in one TPipe exceed the " +
                               std::to_string(QBUF_MAX_LEN) + " it can hand out");
        }
        if (static_cast<uint64_t>(used_) + static_cast<uint64_t>(num) * bytes > TOTAL_UB_SIZE) {
            std::ostringstream message;
            message << "unified buffer overflow: InitBuffer(" << unsigned(num) << " x " << bytes << " bytes) with "
                    << used_ << " bytes already in use exceeds the " << TOTAL_UB_SIZE << "-byte UB";
            standin::Violation(message.str());
        }
        que.slots_.assign(num, standin::BufferSlot{});
        for (standin::BufferSlot& slot : que.slots_) {
            slot.ubOffset = used_;
            slot.bytes = bytes;
            used_ += bytes;
        }
        buffers_ += num;
        return true;
    }

private:
    uint32_t used_ = 0;
    uint32_t buffers_ = 0;
};

// --- include/basic_api/kernel_struct_data_copy.h ------------------------------------------------------------------
struct DataCopyParams {
    DataCopyParams() = default;
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStrideIn, uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;   // 32-byte blocks per burst
    uint16_t srcStride = 0;  // 32-byte blocks between bursts at the source (srcGap in the real header)
    uint16_t dstStride = 0;  // 32-byte blocks between bursts at the destination (dstGap)
};

struct DataCopyExtParams {
    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn, uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;   // bytes per burst
    uint32_t srcStride = 0;  // gap between bursts: bytes in GM, 32-byte blocks in UB
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool isPadIn, uint8_t left, uint8_t right, T value)
        : isPad(isPadIn), leftPadding(left), rightPadding(right), paddingValue(value) {}
    bool isPad = false;
    uint8_t leftPadding = 0;   // elements before each burst in UB
    uint8_t rightPadding = 0;  // elements after it
    T paddingValue = 0;
};

namespace standin {

inline void CheckAligned(uint64_t value, const char* what)
{
    if (value % ONE_BLK_SIZE != 0) {
        Violation(std::string("DataCopy ") + what + " " + std::to_string(value) +
                  " is not a multiple of 32 bytes (use DataCopyPad for unaligned rows)");
    }
}

// The API reference asks GM addresses to be aligned to the element size (DataCopy) or not at all (DataCopyPad);
// a GM pointer that is not element aligned cannot come from a GlobalTensor<T> of the kernel's own buffers.
template <typename T>
void CheckGmAligned(const T* p)
{
    if (reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0) {
        Violation("GM address " + std::to_string(reinterpret_cast<uintptr_t>(p)) + " is not aligned to its " +
                  std::to_string(sizeof(T)) + "-byte element");
    }
}

template <typename T>
void CheckCopyIn(const LocalTensor<T>& dst)
{
    if (dst.Slot()->state != SlotState::Allocated && dst.Slot()->state != SlotState::Calc) {
        Violation("copy into a UB tensor that is not freshly allocated (EnQue/DeQue order broken)");
    }
}

template <typename T>
void CheckCopyOut(const LocalTensor<T>& src)
{
    if (src.Slot()->state != SlotState::Dequeued && src.Slot()->state != SlotState::Calc) {
        Violation("copy out of a UB tensor that was not EnQue'd and DeQue'd after it was filled "
                  "(MTE2 -> MTE3 not synchronised)");
    }
}

inline void CheckRange(uint64_t value, uint64_t low, uint64_t high, const char* field)
{
    if (value < low || value > high) {
        std::ostringstream message;
        message << field << " = " << value << " is outside [" << low << ", " << high << "]";
        Violation(message.str());
    }
}

}  // namespace standin

// --- include/basic_api/kernel_operator_data_copy_intf.h -----------------------------------------------------------
// GM -> UB, contiguous: count elements. The hardware moves count * sizeof(T) rounded down to 32 bytes and drops
// the rest without a word, so a length that is not whole 32-byte blocks is a violation here.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count)
{
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    standin::CheckCopyIn(dst);
    standin::CheckAligned(bytes, "length");
    standin::CheckAligned(dst.UbAddress(), "UB address");
    standin::CheckGmAligned(src.GetPhyAddr());
    src.CheckRange(0, count);
    dst.CheckRange(0, bytes);
    standin::RecordRead(src.GetPhyAddr(), bytes);
    std::memcpy(dst.Bytes(), src.GetPhyAddr(), bytes);
}

// UB -> GM, contiguous.
template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    standin::CheckCopyOut(src);
    standin::CheckAligned(bytes, "length");
    standin::CheckAligned(src.UbAddress(), "UB address");
    standin::CheckGmAligned(dst.GetPhyAddr());
    dst.CheckRange(0, count);
    src.CheckRange(0, bytes);
    standin::RecordWrite(dst.GetPhyAddr(), bytes);
    std::memcpy(dst.GetPhyAddr(0), src.Bytes(), bytes);
}

namespace standin {
// blockCount 0..4095 and blockLen 0..65535; either at zero makes the copy a no-op.
inline bool DataCopyMoves(const DataCopyParams& p)
{
    CheckRange(p.blockCount, 0, MAX_BLOCK_COUNT, "DataCopyParams.blockCount");
    CheckRange(p.blockLen, 0, MAX_DATACOPY_BLOCK_LEN, "DataCopyParams.blockLen");
    return p.blockCount > 0 && p.blockLen > 0;
}
}  // namespace standin

// GM -> UB, blockCount bursts of blockLen 32-byte blocks; strides are gaps in 32-byte blocks.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p)
{
    standin::CheckCopyIn(dst);
    standin::CheckAligned(dst.UbAddress(), "UB address");
    standin::CheckGmAligned(src.GetPhyAddr());
    if (!standin::DataCopyMoves(p)) {
        return;
    }
    const uint64_t burst = static_cast<uint64_t>(p.blockLen) * ONE_BLK_SIZE;
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        uint64_t gmByte = i * (burst + static_cast<uint64_t>(p.srcStride) * ONE_BLK_SIZE);
        uint64_t ubByte = i * (burst + static_cast<uint64_t>(p.dstStride) * ONE_BLK_SIZE);
        src.CheckRange(gmByte / sizeof(T), burst / sizeof(T));
        dst.CheckRange(ubByte, burst);
        const uint8_t* from = reinterpret_cast<const uint8_t*>(src.GetPhyAddr()) + gmByte;
        standin::RecordRead(from, burst);
        std::memcpy(dst.Bytes() + ubByte, from, burst);
    }
}

// UB -> GM, blockCount bursts; srcStride is the UB gap, dstStride the GM gap, both in 32-byte blocks.
template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p)
{
    standin::CheckCopyOut(src);
    standin::CheckAligned(src.UbAddress(), "UB address");
    standin::CheckGmAligned(dst.GetPhyAddr());
    if (!standin::DataCopyMoves(p)) {
        return;
    }
    const uint64_t burst = static_cast<uint64_t>(p.blockLen) * ONE_BLK_SIZE;
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        uint64_t ubByte = i * (burst + static_cast<uint64_t>(p.srcStride) * ONE_BLK_SIZE);
        uint64_t gmByte = i * (burst + static_cast<uint64_t>(p.dstStride) * ONE_BLK_SIZE);
        dst.CheckRange(gmByte / sizeof(T), burst / sizeof(T));
        src.CheckRange(ubByte, burst);
        uint8_t* to = reinterpret_cast<uint8_t*>(dst.GetPhyAddr(0)) + gmByte;
        standin::RecordWrite(to, burst);
        std::memcpy(to, src.Bytes() + ubByte, burst);
    }
}

namespace standin {
// blockCount 0..4095, blockLen 0..2097151 bytes and whole elements; either at zero makes the copy a no-op.
template <typename T>
bool DataCopyPadMoves(const DataCopyExtParams& p)
{
    CheckRange(p.blockCount, 0, MAX_BLOCK_COUNT, "DataCopyExtParams.blockCount");
    CheckRange(p.blockLen, 0, MAX_DATACOPYPAD_BLOCK_LEN, "DataCopyExtParams.blockLen");
    if (p.blockLen % sizeof(T) != 0) {
        Violation("DataCopyExtParams.blockLen is not a whole number of elements");
    }
    return p.blockCount > 0 && p.blockLen > 0;
}
}  // namespace standin

// GM -> UB with any byte length: each burst (with leftPadding/rightPadding elements around it) lands at a 32-byte
// boundary in UB. The padding elements take paddingValue when isPad is set, else undefined values; the dummy bytes
// up to the next 32-byte boundary are undefined. Undefined bytes are poisoned here.
template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                 const DataCopyPadExtParams<T>& pad)
{
    standin::CheckCopyIn(dst);
    standin::CheckAligned(dst.UbAddress(), "UB address");
    standin::CheckGmAligned(src.GetPhyAddr());
    if (!standin::DataCopyPadMoves<T>(p)) {
        return;
    }
    const uint64_t left = pad.leftPadding * sizeof(T), right = pad.rightPadding * sizeof(T);
    if (left > ONE_BLK_SIZE || right > ONE_BLK_SIZE) {
        standin::Violation("DataCopyPadExtParams: leftPadding and rightPadding may cover at most 32 bytes each");
    }
    const uint64_t filled = left + p.blockLen + right;
    const uint64_t padded = (filled + ONE_BLK_SIZE - 1) / ONE_BLK_SIZE * ONE_BLK_SIZE;
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        uint64_t gmByte = i * (static_cast<uint64_t>(p.blockLen) + p.srcStride);
        uint64_t ubByte = i * (padded + static_cast<uint64_t>(p.dstStride) * ONE_BLK_SIZE);
        src.CheckRange(gmByte / sizeof(T), p.blockLen / sizeof(T));
        dst.CheckRange(ubByte, padded);
        const uint8_t* from = reinterpret_cast<const uint8_t*>(src.GetPhyAddr()) + gmByte;
        uint8_t* to = dst.Bytes() + ubByte;
        standin::RecordRead(from, p.blockLen);
        std::memset(to, UB_POISON, padded);
        std::memcpy(to + left, from, p.blockLen);
        if (pad.isPad) {
            for (uint64_t e = 0; e < left / sizeof(T); ++e) {
                std::memcpy(to + e * sizeof(T), &pad.paddingValue, sizeof(T));
            }
            for (uint64_t e = 0; e < right / sizeof(T); ++e) {
                std::memcpy(to + left + p.blockLen + e * sizeof(T), &pad.paddingValue, sizeof(T));
            }
        }
    }
}

// UB -> GM with any byte length: bursts start at 32-byte boundaries in UB (srcStride: UB gap in 32-byte
// blocks) and are written back to back in GM apart from dstStride bytes.
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p)
{
    standin::CheckCopyOut(src);
    standin::CheckAligned(src.UbAddress(), "UB address");
    standin::CheckGmAligned(dst.GetPhyAddr());
    if (!standin::DataCopyPadMoves<T>(p)) {
        return;
    }
    const uint64_t padded = (p.blockLen + ONE_BLK_SIZE - 1) / ONE_BLK_SIZE * ONE_BLK_SIZE;
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        uint64_t ubByte = i * (padded + static_cast<uint64_t>(p.srcStride) * ONE_BLK_SIZE);
        uint64_t gmByte = i * (static_cast<uint64_t>(p.blockLen) + p.dstStride);
        dst.CheckRange(gmByte / sizeof(T), p.blockLen / sizeof(T));
        src.CheckRange(ubByte, p.blockLen);
        uint8_t* to = reinterpret_cast<uint8_t*>(dst.GetPhyAddr(0)) + gmByte;
        standin::RecordWrite(to, p.blockLen);
        std::memcpy(to, src.Bytes() + ubByte, p.blockLen);
    }
}

}  // namespace AscendC
