// The tiling every KV layout kernel receives by value: computed on the host (host/kv_tiling.cpp), read on the
// vector cores. A plain struct with fixed-width fields so the host, the device and the ctypes bridge agree on it.
#ifndef ASCEND_PD_KV_TILING_H
#define ASCEND_PD_KV_TILING_H

#include <cstdint>

struct KvTiling {
    uint64_t srcBlocks;    // blocks in the source tensor: bounds of its global buffer
    uint64_t dstBlocks;    // blocks in the destination tensor
    uint64_t idBlocks;     // blocks in the tensor the listed ids index: each id must lie in [0, idBlocks)
    uint32_t numIds;       // block ids listed for this call
    uint32_t usedCores;    // vector cores launched (blockDim)
    uint32_t idsPerCore;   // listed blocks each core moves: core c takes [c * idsPerCore, (c + 1) * idsPerCore)
    uint32_t tokens;       // rows (tokens) in one block
    uint32_t tileTokens;   // rows moved through UB at a time
    uint32_t bufferBytes;  // bytes of one UB buffer
    uint32_t bufferNum;    // UB buffers in the queue: 2 for double buffering
    uint32_t aligned;      // 1: every row copy starts and ends on 32 bytes (DataCopy); 0: DataCopyPad
    uint32_t srcRowElems;  // elements in one token row of a source block
    uint32_t dstRowElems;  // elements in one token row of a destination block
    uint32_t copyElems;    // elements moved per row (gather/scatter: heads x head_dim; MLA: kv_lora_rank)
    uint32_t srcColumn;    // first element moved inside a source row
    uint32_t dstColumn;    // first element written inside a destination row
    uint32_t pieces;       // block_transpose: split; NZ: fractal columns (heads x head_dim / c0)
    uint32_t fullLoad;     // block_transpose: 1 = whole block staged in UB, 0 = through a GM workspace per core
};

#endif
