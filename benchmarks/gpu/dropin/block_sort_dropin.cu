// The drop-in's hot-start kernel (benchmarks/gpu/dropin/dropin.py): a CUB
// block radix sort followed by an exclusive scan, one tile per block. CUB's
// headers make NVRTC take seconds, which is what a cache is for.
#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

template <int BLOCK, int ITEMS>
__global__ void sort_then_scan(const int *in, int *out)
{
    using Load = cub::BlockLoad<int, BLOCK, ITEMS, cub::BLOCK_LOAD_TRANSPOSE>;
    using Sort = cub::BlockRadixSort<int, BLOCK, ITEMS>;
    using Scan = cub::BlockScan<int, BLOCK>;
    using Store = cub::BlockStore<int, BLOCK, ITEMS, cub::BLOCK_STORE_TRANSPOSE>;
    __shared__ union {
        typename Load::TempStorage load;
        typename Sort::TempStorage sort;
        typename Scan::TempStorage scan;
        typename Store::TempStorage store;
    } tmp;
    int items[ITEMS];
    const int tile = blockIdx.x * BLOCK * ITEMS;
    Load(tmp.load).Load(in + tile, items);
    __syncthreads();
    Sort(tmp.sort).Sort(items); // blocked: thread t holds ranks t*ITEMS ...
    __syncthreads();
    Scan(tmp.scan).ExclusiveSum(items, items);
    __syncthreads();
    Store(tmp.store).Store(out + tile, items);
}
