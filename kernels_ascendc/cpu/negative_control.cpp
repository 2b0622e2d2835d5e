// A call the real AscendC API rejects, for check_headers.sh: TQueBind::FreeTensor takes a non-const
// LocalTensor<T>& (include/basic_api/kernel_tpipe.h). Headers that compile this are looser than the toolkit.
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void negative_control(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 2> queue;
    pipe.InitBuffer(queue, 2, 1024);
    const AscendC::LocalTensor<uint16_t> ub = queue.AllocTensor<uint16_t>();
    queue.FreeTensor(ub);
}
