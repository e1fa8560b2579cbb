// A slow compile on purpose: CUB's block-wide radix sort and scan, in three
// instantiations, take NVRTC seconds, which is what a cache is for.
// Needs the toolkit's CCCL headers: -I <cuda>/include/cccl --std c++17.
//
// sort_then_scan<THREADS, PER_THREAD>: each block sorts its THREADS *
// PER_THREAD ints (thread t holds the consecutive items t*PER_THREAD ...),
// then writes their exclusive prefix sum in that sorted order.
#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

template <int THREADS, int PER_THREAD>
__global__ void sort_then_scan(const int *in, int *out)
{
    using Sorter = cub::BlockRadixSort<int, THREADS, PER_THREAD>;
    using Scanner = cub::BlockScan<int, THREADS>;
    // The two phases never overlap in time, so they share one allocation.
    __shared__ union {
        typename Sorter::TempStorage sort;
        typename Scanner::TempStorage scan;
    } scratch;

    const int offset = blockIdx.x * THREADS * PER_THREAD;
    int items[PER_THREAD];
    cub::LoadDirectBlocked(threadIdx.x, in + offset, items);
    Sorter(scratch.sort).Sort(items);
    __syncthreads(); // scratch.sort is about to be reused as scratch.scan
    Scanner(scratch.scan).ExclusiveSum(items, items);
    cub::StoreDirectBlocked(threadIdx.x, out + offset, items);
}

template __global__ void sort_then_scan<128, 4>(const int *, int *);
template __global__ void sort_then_scan<256, 8>(const int *, int *);
template __global__ void sort_then_scan<512, 4>(const int *, int *);
