// bench/gpu/launch_loop: the timed CUDA workload of bench/gpu/run and bench/system/cudacost.
//   launch_loop empty N        N <<<>>> launches of an empty kernel (launch-bound), timed
//   launch_loop spin N US      N launches of a kernel that spins US microseconds on the GPU,
//                              then one cudaDeviceSynchronize (known kernel durations)
//   launch_loop flood N US     N launches of a US-microsecond kernel with no sync: once the
//                              launch queue is full each launch call blocks (slow launches)
//   launch_loop paced N        N launches of an empty kernel 100 us apart, each timed alone:
//                              wall is the mean time inside one launch call, what a workload
//                              that is not launch-bound feels (sampling windows, issue 34)
// It prints "ready" once SIGUSR1 is blocked and waits for SIGUSR1, so a tracer can attach
// first (--now skips the wait), runs once, and prints one line:
//   launches=N wall_ns_per_launch=X cpu_ns_per_launch=Y first_error=STRING
// Without a GPU every launch fails fast (the driver error is reported, the loop still runs),
// which is what per-launch probe cost on a GPU-less machine measures.
#include <signal.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void empty_kernel() {}

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

static uint64_t now_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s empty|spin|flood|paced N [US] [--now]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  const long n = atol(argv[2]);
  const long us = argc > 3 && argv[3][0] != '-' ? atol(argv[3]) : 0;
  const bool now = !strcmp(argv[argc - 1], "--now");
  long long cycles = 0;
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess) cycles = (long long)khz * us / 1000;

  sigset_t set;
  int sig;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  printf("ready\n");
  fflush(stdout);
  if (!now) sigwait(&set, &sig);

  const uint64_t w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  cudaError_t first = cudaSuccess;
  if (!strcmp(mode, "paced")) {
    uint64_t inside = 0;
    const timespec gap = {0, 100000};
    for (long i = 0; i < n; i++) {
      const uint64_t t0 = now_ns(CLOCK_MONOTONIC);
      empty_kernel<<<1, 1>>>();
      inside += now_ns(CLOCK_MONOTONIC) - t0;
      const cudaError_t e = cudaGetLastError();
      if (first == cudaSuccess) first = e;
      nanosleep(&gap, nullptr);
    }
    const uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    printf("launches=%ld wall_ns_per_launch=%.1f cpu_ns_per_launch=%.1f first_error=%s\n", n,
           double(inside) / double(n ? n : 1), double(c1 - c0) / double(n ? n : 1), cudaGetErrorName(first));
    return 0;
  }
  for (long i = 0; i < n; i++) {
    if (!strcmp(mode, "empty")) empty_kernel<<<1, 1>>>();
    else spin_kernel<<<1, 1>>>(cycles);
    const cudaError_t e = cudaGetLastError();
    if (first == cudaSuccess) first = e;
  }
  const uint64_t w1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  if (!strcmp(mode, "spin")) cudaDeviceSynchronize();
  else if (!strcmp(mode, "flood")) cudaDeviceSynchronize();
  printf("launches=%ld wall_ns_per_launch=%.1f cpu_ns_per_launch=%.1f first_error=%s\n", n,
         double(w1 - w0) / double(n ? n : 1), double(c1 - c0) / double(n ? n : 1), cudaGetErrorName(first));
  return 0;
}
