/* memcount.c — an LD_PRELOAD counter of live heap bytes for the PyTorch
 * harness. PyTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp) takes every
 * tensor's storage from posix_memalign and returns it with free, so counting
 * those calls gives the CPU twin of torch.cuda.memory_allocated() and its
 * peak. Python's own objects come from malloc and are not counted. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
enum { SLOTS = 1 << 22 };
static struct { void *p; size_t n; } table[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int (*real_pm)(void **, size_t, size_t);
static void (*real_free)(void *);
static long long cur, peak;
static size_t slot(void *p) { return ((uintptr_t)p >> 6) * 0x9E3779B97F4A7C15ull >> 42; }
int posix_memalign(void **out, size_t align, size_t n) {
  if (!real_pm) real_pm = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  int r = real_pm(out, align, n);
  if (r == 0 && *out) {
    pthread_mutex_lock(&mu);
    size_t i = slot(*out);
    while (table[i].p) i = (i + 1) & (SLOTS - 1);
    table[i].p = *out; table[i].n = n;
    cur += n; if (cur > peak) peak = cur;
    pthread_mutex_unlock(&mu);
  }
  return r;
}
void free(void *p) {
  if (!real_free) real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  if (p) {
    pthread_mutex_lock(&mu);
    size_t i = slot(p);
    while (table[i].p && table[i].p != p) i = (i + 1) & (SLOTS - 1);
    if (table[i].p == p) {
      cur -= table[i].n;
      /* backward-shift deletion keeps probe chains intact */
      size_t j = i;
      for (;;) {
        j = (j + 1) & (SLOTS - 1);
        if (!table[j].p) break;
        size_t k = slot(table[j].p);
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) { table[i] = table[j]; i = j; }
      }
      table[i].p = 0; table[i].n = 0;
    }
    pthread_mutex_unlock(&mu);
  }
  real_free(p);
}
long long memcount_current(void) { return cur; }
long long memcount_peak(void) { return peak; }
void memcount_reset_peak(void) { pthread_mutex_lock(&mu); peak = cur; pthread_mutex_unlock(&mu); }
