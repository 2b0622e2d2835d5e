// Tiling for the KV layout kernels (see kv_plan.h).
#include "kv_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kv {
namespace {

constexpr uint64_t DATA_BLOCK = 32;
constexpr uint64_t MAX_BLOCK_COUNT = 4095;  // DataCopy / DataCopyPad bursts per call
constexpr uint64_t MAX_DATACOPY_FIELD = 65535;  // DataCopyParams blockLen and gaps, in 32-byte blocks
constexpr uint32_t DOUBLE_BUFFER = 2;

void Require(bool ok, const std::string& what)
{
    if (!ok) {
        throw std::invalid_argument(what);
    }
}

uint64_t Pitch(uint64_t bytes) { return (bytes + DATA_BLOCK - 1) / DATA_BLOCK * DATA_BLOCK; }

// DataCopy is usable when every offset and length is whole 32-byte blocks and each gap fits its 16-bit field.
bool DataCopyRows(uint32_t elemBytes, std::initializer_list<uint64_t> offsetsAndLengths, uint64_t rowBytes,
                  std::initializer_list<uint64_t> gapBytes)
{
    for (uint64_t v : offsetsAndLengths) {
        if ((v * elemBytes) % DATA_BLOCK != 0) {
            return false;
        }
    }
    if (rowBytes / DATA_BLOCK > MAX_DATACOPY_FIELD) {
        return false;
    }
    for (uint64_t gap : gapBytes) {
        if (gap / DATA_BLOCK > MAX_DATACOPY_FIELD) {
            return false;
        }
    }
    return true;
}

KvTiling Base(uint64_t srcBlocks, uint64_t dstBlocks, uint64_t idBlocks, uint32_t tokens, uint32_t elemBytes,
              uint32_t numIds, CoreBudget budget)
{
    Require(elemBytes == 1 || elemBytes == 2, "element size must be 1 (int8) or 2 (bf16/fp16) bytes");
    Require(numIds > 0, "no block ids to move");
    Require(tokens > 0, "block_size must be positive");
    Require(budget.vectorCores > 0 && budget.ubBytes >= 2 * DATA_BLOCK, "no vector cores or no unified buffer");
    KvTiling t{};
    t.srcBlocks = srcBlocks;
    t.dstBlocks = dstBlocks;
    t.idBlocks = idBlocks;
    t.numIds = numIds;
    t.tokens = tokens;
    t.idsPerCore = (numIds + budget.vectorCores - 1) / budget.vectorCores;
    t.usedCores = (numIds + t.idsPerCore - 1) / t.idsPerCore;
    return t;
}

// Two buffers (double buffering) of as many token rows of rowPitch bytes as fit in the unified buffer.
void TileRows(KvTiling& t, uint64_t rowPitch, CoreBudget budget)
{
    const uint64_t rowsFit = budget.ubBytes / DOUBLE_BUFFER / rowPitch;
    Require(rowsFit >= 1, "one row of " + std::to_string(rowPitch) + " bytes does not fit half the unified buffer");
    t.bufferNum = DOUBLE_BUFFER;
    t.tileTokens = static_cast<uint32_t>(std::min<uint64_t>({t.tokens, rowsFit, MAX_BLOCK_COUNT}));
    t.bufferBytes = static_cast<uint32_t>(t.tileTokens * rowPitch);
}

KvTiling PlanHeadSlice(uint64_t srcBlocks, uint64_t dstBlocks, uint64_t cacheBlocks, uint32_t tokens,
                       uint32_t heads, uint32_t headDim, uint32_t elemBytes, uint32_t numIds, uint32_t headStart,
                       uint32_t headCount, CoreBudget budget)
{
    Require(headCount > 0 && headStart + headCount <= heads, "head range outside the cache");
    KvTiling t = Base(srcBlocks, dstBlocks, cacheBlocks, tokens, elemBytes, numIds, budget);
    const uint64_t copyBytes = static_cast<uint64_t>(headCount) * headDim * elemBytes;
    t.copyElems = headCount * headDim;
    t.aligned = DataCopyRows(elemBytes, {t.copyElems, uint64_t(headStart) * headDim, uint64_t(heads) * headDim},
                             copyBytes, {uint64_t(heads - headCount) * headDim * elemBytes});
    TileRows(t, Pitch(copyBytes), budget);
    return t;
}

}  // namespace

KvTiling PlanGatherHeads(uint64_t numBlocks, uint32_t tokens, uint32_t heads, uint32_t headDim, uint32_t elemBytes,
                         uint32_t numIds, uint32_t headStart, uint32_t headCount, CoreBudget budget)
{
    KvTiling t = PlanHeadSlice(numBlocks, numIds, numBlocks, tokens, heads, headDim, elemBytes, numIds, headStart,
                               headCount, budget);
    t.srcRowElems = heads * headDim;
    t.srcColumn = headStart * headDim;
    t.dstRowElems = headCount * headDim;
    return t;
}

KvTiling PlanScatterHeads(uint64_t numBlocks, uint32_t tokens, uint32_t heads, uint32_t headDim, uint32_t elemBytes,
                          uint32_t numIds, uint32_t headStart, uint32_t headCount, CoreBudget budget)
{
    KvTiling t = PlanHeadSlice(numIds, numBlocks, numBlocks, tokens, heads, headDim, elemBytes, numIds, headStart,
                               headCount, budget);
    t.srcRowElems = headCount * headDim;
    t.dstRowElems = heads * headDim;
    t.dstColumn = headStart * headDim;
    return t;
}

KvTiling PlanBlockTranspose(uint64_t numBlocks, uint32_t tokens, uint32_t heads, uint32_t headDim,
                            uint32_t elemBytes, uint32_t numIds, uint32_t split, CoreBudget budget)
{
    Require(split > 0 && heads % split == 0, "split must divide the head count");
    KvTiling t = Base(numBlocks, 0, numBlocks, tokens, elemBytes, numIds, budget);
    const uint64_t rowElems = static_cast<uint64_t>(heads) * headDim;
    t.srcRowElems = t.dstRowElems = static_cast<uint32_t>(rowElems);
    t.copyElems = heads / split * headDim;
    t.pieces = split;
    const uint64_t pieceBytes = static_cast<uint64_t>(t.copyElems) * elemBytes;
    t.aligned = DataCopyRows(elemBytes, {t.copyElems}, pieceBytes, {(split - 1) * Pitch(pieceBytes)});
    const uint64_t stagedBytes = static_cast<uint64_t>(tokens) * split * Pitch(pieceBytes);
    if (stagedBytes <= budget.ubBytes && static_cast<uint64_t>(tokens) * split <= MAX_BLOCK_COUNT) {
        t.fullLoad = 1;
        t.bufferNum = 1;
        t.tileTokens = tokens;
        t.bufferBytes = static_cast<uint32_t>(stagedBytes);
        return t;
    }
    t.fullLoad = 0;
    t.dstBlocks = t.usedCores;  // one staging block of GM workspace per core
    TileRows(t, Pitch(rowElems * elemBytes), budget);
    if (t.aligned) {
        t.aligned = DataCopyRows(elemBytes, {rowElems}, rowElems * elemBytes, {rowElems * elemBytes});
    }
    return t;
}

void CheckLaunch(const KvTiling& t, const int32_t* hostIds, uint32_t vectorCores)
{
    Require(t.usedCores >= 1 && t.usedCores <= vectorCores,
            "the launch needs " + std::to_string(t.usedCores) + " cores but the device has " +
                std::to_string(vectorCores) + " vector cores");
    Require(static_cast<uint64_t>(t.usedCores) * t.idsPerCore >= t.numIds, "the launch does not cover every block id");
    for (uint32_t i = 0; i < t.numIds; ++i) {
        Require(hostIds[i] >= 0 && static_cast<uint64_t>(hostIds[i]) < t.idBlocks,
                "block id " + std::to_string(hostIds[i]) + " at position " + std::to_string(i) + " is outside the " +
                    std::to_string(t.idBlocks) + " blocks of the tensor it indexes");
    }
}

uint64_t BlockTransposeWorkspaceBytes(const KvTiling& t, uint32_t elemBytes)
{
    return t.fullLoad ? 0 : t.dstBlocks * t.tokens * static_cast<uint64_t>(t.srcRowElems) * elemBytes;
}

KvTiling PlanMlaSplit(uint64_t numBlocks, uint32_t tokens, uint32_t loraRank, uint32_t ropeDim, uint32_t elemBytes,
                      uint32_t numIds, CoreBudget budget)
{
    Require(loraRank > 0 && ropeDim > 0, "kv_lora_rank and rope_dim must be positive");
    KvTiling t = Base(numBlocks, numIds, numBlocks, tokens, elemBytes, numIds, budget);
    t.srcRowElems = loraRank + ropeDim;
    t.dstRowElems = loraRank;
    t.copyElems = loraRank;
    const uint64_t widest = std::max(loraRank, ropeDim) * uint64_t(elemBytes);
    t.aligned = DataCopyRows(elemBytes, {loraRank, ropeDim}, widest, {widest});
    TileRows(t, Pitch(widest), budget);
    return t;
}

KvTiling PlanMlaFuse(uint64_t numBlocks, uint32_t tokens, uint32_t loraRank, uint32_t ropeDim, uint32_t elemBytes,
                     uint32_t numIds, CoreBudget budget)
{
    KvTiling t = PlanMlaSplit(numBlocks, tokens, loraRank, ropeDim, elemBytes, numIds, budget);
    t.srcRowElems = loraRank;
    t.dstRowElems = loraRank + ropeDim;
    return t;
}

namespace {
KvTiling PlanNz(uint64_t srcBlocks, uint64_t dstBlocks, uint32_t tokens, uint32_t features, uint32_t elemBytes,
                uint32_t numIds, CoreBudget budget)
{
    KvTiling t = Base(srcBlocks, dstBlocks, srcBlocks, tokens, elemBytes, numIds, budget);
    const uint32_t c0 = DATA_BLOCK / elemBytes;
    Require(features % c0 == 0, "heads * head_dim must be a multiple of the fractal width " + std::to_string(c0));
    // a fractal column copy skips the other columns of each row in UB: a gap of F - 1 blocks
    Require(features / c0 - 1 <= MAX_DATACOPY_FIELD, "too many fractal columns for the UB gap of one DataCopy");
    t.srcRowElems = t.dstRowElems = features;
    t.copyElems = c0;
    t.pieces = features / c0;
    t.aligned = 1;  // rows are whole fractals and every NZ piece is exactly one 32-byte block
    TileRows(t, static_cast<uint64_t>(features) * elemBytes, budget);
    return t;
}
}  // namespace

KvTiling PlanNdToNz(uint64_t numBlocks, uint32_t tokens, uint32_t features, uint32_t elemBytes, uint32_t numIds,
                    CoreBudget budget)
{
    return PlanNz(numBlocks, numIds, tokens, features, elemBytes, numIds, budget);
}

KvTiling PlanNzToNd(uint64_t numBlocks, uint32_t tokens, uint32_t features, uint32_t elemBytes, uint32_t numIds,
                    CoreBudget budget)
{
    return PlanNz(numBlocks, numIds, tokens, features, elemBytes, numIds, budget);
}

}  // namespace kv
