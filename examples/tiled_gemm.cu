// C = A * B for square n x n row-major matrices, through TILE x TILE tiles of
// shared memory. A template with no instantiation of its own: callers reach
// it through name expressions such as "tiled_gemm<float, 16>" and
// "tiled_gemm<double, 8>", so a cache hit must give back the lowered
// (mangled) name of each expression along with the CUBIN.
// Launch with TILE x TILE threads per block and ceil(n / TILE)^2 blocks.
template <typename T, int TILE>
__global__ void tiled_gemm(const T *a, const T *b, T *c, int n)
{
    __shared__ T a_tile[TILE][TILE];
    __shared__ T b_tile[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    T sum = T(0);
    for (int base = 0; base < n; base += TILE) {
        // Out-of-range elements load as zero, so the edge tiles need no
        // special case in the inner product.
        a_tile[ty][tx] = (row < n && base + tx < n) ? a[row * n + base + tx] : T(0);
        b_tile[ty][tx] = (col < n && base + ty < n) ? b[(base + ty) * n + col] : T(0);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            sum += a_tile[ty][k] * b_tile[k][tx];
        __syncthreads();
    }
    if (row < n && col < n)
        c[row * n + col] = sum;
}
