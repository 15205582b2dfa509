/* Big blocks built from the pages earlier blocks freed: a malloc interposer that mpignn.launch.allocator
compiles and preloads (MPIGNN_MALLOC=pages, the default where a C compiler is found).

Why: a training step allocates hundreds of blocks of 256 KiB and more, of other sizes every step. glibc's heap
serves them fast but fragments (its peak grows every epoch); mapping each one afresh keeps memory flat, but every
new page faults and is zeroed. Here every big block is whole chunks (2 MiB, a huge page, for blocks of 2 MiB and
more; 64 KiB below). A freed block waits in a pool as a run of chunks. A new block takes the smallest run that
holds it, where it lies (no system call: each one is also an event that MPI's UCX queues); only if none does are
runs moved into its address range (mremap: the pages move, nothing is copied or zeroed), and only then are new
pages mapped. So the pool plus the blocks in use never hold more chunks than the most in use at once, whatever
the sizes asked for; runs that wait MPIGNN_BIGBLOCK_AGE big allocations unused are unmapped. Requests under
256 KiB and alignments above 64 bytes go to glibc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

#define PAGE 4096UL
#define HEAD 64UL              /* the user's pointer is a page start + 64: 64-byte aligned, as torch asks */
#define MIN_BIG (256UL << 10)
#define MAX_BIG (1UL << 40)
#define HUGE (2UL << 20)       /* blocks of a huge page or more are built from huge-page chunks, the rest from */
#define SMALL (64UL << 10)     /* 64 KiB chunks: every chunk is its own kernel mapping at most, so not too many */
#define LIVE_SLOTS 8192        /* open addressing over the blocks in use, by start */

typedef struct { uintptr_t base; size_t len; int pool; } block;  /* len: whole chunks of pools[pool] */
typedef struct { uintptr_t addr; size_t len; uint64_t last; } run_t;  /* freed chunks, contiguous, one mapping */
typedef struct { run_t *runs; size_t cap, n, chunk; uint64_t oldest; } pool_t;  /* oldest: no run waited longer */

static run_t huge_runs[1 << 12], small_runs[1 << 12];
static pool_t pools[2] = {{huge_runs, 1 << 12, 0, HUGE, 0}, {small_runs, 1 << 12, 0, SMALL, 0}};
static block live[LIVE_SLOTS];
static int n_live;
static uint64_t tick, max_age = 4096;
static uint64_t n_blocks, n_moved, n_fresh, n_in_place;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ready;

static size_t slot_of(uintptr_t base) { return (size_t)((base >> 12) * 0x9E3779B97F4A7C15ULL >> 51); }

static void live_add(uintptr_t base, size_t len, int pool) {
    size_t i = slot_of(base);
    while (live[i].base) i = (i + 1) & (LIVE_SLOTS - 1);
    live[i] = (block){base, len, pool};
    n_live++;
}

static block *live_find(uintptr_t base) {
    size_t i = slot_of(base);
    while (live[i].base) {
        if (live[i].base == base) return &live[i];
        i = (i + 1) & (LIVE_SLOTS - 1);
    }
    return NULL;
}

/* Linear probing's deletion: shift later entries of the run back so that no search stops early. */
static void live_remove(block *b) {
    size_t i = (size_t)(b - live), j = i;
    live[i].base = 0;
    n_live--;
    for (;;) {
        j = (j + 1) & (LIVE_SLOTS - 1);
        if (!live[j].base) return;
        size_t home = slot_of(live[j].base);
        int between = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!between) {
            live[i] = live[j];
            live[j].base = 0;
            i = j;
        }
    }
}

/* For mpignn.launch.allocator: blocks made, chunks reused from the pool, chunks of new pages, bytes pooled, blocks
   taken where a run lay (no system call). */
void mpignn_bigblocks_stats(uint64_t out[5]) {
    pthread_mutex_lock(&lock);
    out[0] = n_blocks;
    out[1] = n_moved;
    out[2] = n_fresh;
    out[4] = n_in_place;
    out[3] = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < pools[k].n; i++) out[3] += pools[k].runs[i].len;
    pthread_mutex_unlock(&lock);
}

static void setup(void) {
    const char *age = getenv("MPIGNN_BIGBLOCK_AGE");
    if (age && *age) max_age = strtoull(age, NULL, 10);
    ready = 1;
}

static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork(void) { pthread_mutex_unlock(&lock); }

__attribute__((constructor)) static void init(void) { pthread_atfork(before_fork, after_fork, after_fork); }

static void drop(pool_t *q, size_t i) { q->runs[i] = q->runs[--q->n]; }

/* Unmaps the runs that waited more than max_age big allocations; the runs are looked at only when one may have. */
static void expire(pool_t *q) {
    if (!q->n || tick - q->oldest <= max_age) return;
    q->oldest = tick;
    for (size_t i = q->n; i-- > 0;) {
        if (tick - q->runs[i].last > max_age) {
            munmap((void *)q->runs[i].addr, q->runs[i].len);
            drop(q, i);
        } else if (q->runs[i].last < q->oldest) {
            q->oldest = q->runs[i].last;
        }
    }
}

static void push(pool_t *q, uintptr_t addr, size_t len) {
    if (q->n == q->cap) {
        munmap((void *)addr, len);
        return;
    }
    if (!q->n) q->oldest = tick;
    q->runs[q->n++] = (run_t){addr, len, tick};
}

/* The smallest run that holds len bytes, else the largest (-1: none). */
static long fit(pool_t *q, size_t len) {
    long best = -1, largest = -1;
    for (size_t i = 0; i < q->n; i++) {
        size_t l = q->runs[i].len;
        if (l >= len && (best < 0 || l < q->runs[best].len)) best = (long)i;
        if (largest < 0 || l > q->runs[largest].len) largest = (long)i;
    }
    return best >= 0 ? best : largest;
}

/* Moves `part` pooled bytes to `to`; returns how many moved. Before Linux 6.17 one mremap moves one kernel mapping,
   and a run freed from a block built of moved runs can span several: then chunk by chunk (no chunk spans two).
   What was not moved is unmapped, and the rest of `to` is made zero pages again (since 6.17 a failed move can be
   partly done). */
static size_t move(uintptr_t from, size_t part, uintptr_t to, size_t c) {
#ifndef BIGBLOCKS_CHUNKWISE /* tests build it with, to take the path older kernels take */
    if (mremap((void *)from, part, part, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)to) != MAP_FAILED) return part;
#endif
    size_t off = 0;
    while (off < part && mremap((void *)(from + off), c, c, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(to + off))
                             != MAP_FAILED)
        off += c;
    if (off < part) {
        munmap((void *)(from + off), part - off);
        madvise((void *)(to + off), part - off, MADV_DONTNEED);
    }
    return off;
}

/* A block of `need` bytes (HEAD included), whole chunks. A freed run that holds it is used where it lies (no
   system call); else runs are moved into a new range, largest first, and only the rest is new pages. *reused: how
   many of its first bytes are old pages (not zero). Called with the lock held. */
static void *take(size_t need, size_t *reused) {
    if (!ready) setup();
    if (n_live >= LIVE_SLOTS / 2) return NULL;
    int which = need >= HUGE ? 0 : 1;
    pool_t *q = &pools[which];
    size_t c = q->chunk, len = (need + c - 1) & ~(c - 1), span = len + (c == HUGE ? c : 0);
    tick++;
    expire(&pools[0]);
    expire(&pools[1]);
    long i = fit(q, len);
    if (i >= 0 && q->runs[i].len >= len) {
        uintptr_t base = q->runs[i].addr;
        q->runs[i].addr += len;
        q->runs[i].len -= len;
        if (!q->runs[i].len) drop(q, (size_t)i);
        n_moved += len / c;
        n_in_place++;
        n_blocks++;
        live_add(base, len, which);
        *reused = len;
        return (void *)(base + HEAD);
    }
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    uintptr_t base = span > len ? ((uintptr_t)p + c - 1) & ~(c - 1) : (uintptr_t)p;  /* huge pages move whole */
    if (base > (uintptr_t)p) munmap(p, base - (uintptr_t)p);
    if ((uintptr_t)p + span > base + len) munmap((void *)(base + len), (uintptr_t)p + span - base - len);
    size_t done = 0;
    while (q->n && done < len) {
        run_t *r = &q->runs[fit(q, len - done)];
        size_t part = r->len < len - done ? r->len : len - done;
        uintptr_t from = r->addr;
        r->addr += part;
        r->len -= part;
        if (!r->len) drop(q, (size_t)(r - q->runs));
        size_t moved = move(from, part, base + done, c);
        done += moved;
        n_moved += moved / c;
        if (moved < part) break;
    }
    if (done < len && c == HUGE) madvise((void *)(base + done), len - done, MADV_HUGEPAGE);
    n_fresh += (len - done) / c;
    n_blocks++;
    live_add(base, len, which);
    *reused = done;
    return (void *)(base + HEAD);
}

static void *big(size_t n, size_t *reused) {
    pthread_mutex_lock(&lock);
    void *p = take(n + HEAD, reused);
    pthread_mutex_unlock(&lock);
    return p;
}

/* Frees p into the pool if it is one of ours (returns 1), else returns 0; with `size`, only reports its size. */
static int give_back(void *p, size_t *size) {
    uintptr_t u = (uintptr_t)p;
    if ((u & (PAGE - 1)) != HEAD) return 0;
    pthread_mutex_lock(&lock);
    block *b = live_find(u - HEAD);
    if (!b) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    if (size) {
        *size = b->len - HEAD;
    } else {
        push(&pools[b->pool], b->base, b->len);
        live_remove(b);
    }
    pthread_mutex_unlock(&lock);
    return 1;
}

void *malloc(size_t n) {
    if (n >= MIN_BIG && n < MAX_BIG) {
        size_t reused;
        void *p = big(n, &reused);
        if (p) return p;
    }
    return __libc_malloc(n);
}

void free(void *p) {
    if (p && !give_back(p, NULL)) __libc_free(p);
}

void *calloc(size_t count, size_t size) {
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    if (n >= MIN_BIG && n < MAX_BIG) {
        size_t reused;
        void *p = big(n, &reused);
        if (p) {
            if (reused > HEAD) memset(p, 0, reused - HEAD < n ? reused - HEAD : n);
            return p;
        }
    }
    return __libc_calloc(count, size);
}

void *realloc(void *p, size_t n) {
    size_t have;
    if (!p) return malloc(n);
    if (!give_back(p, &have)) return __libc_realloc(p, n);
    if (n == 0) {
        free(p);
        return NULL;
    }
    if (n <= have) return p;
    void *q = malloc(n);
    if (!q) return NULL;
    memcpy(q, p, have);
    free(p);
    return q;
}

void *reallocarray(void *p, size_t count, size_t size) {
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n);
}

static void *aligned(size_t align, size_t n) {
    if (align <= HEAD && n >= MIN_BIG && n < MAX_BIG) {
        size_t reused;
        void *p = big(n, &reused);
        if (p) return p;
    }
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = aligned(align, n);
    if (!p && n) return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n) { return aligned(align, n); }

void *memalign(size_t align, size_t n) { return aligned(align, n); }

void *valloc(size_t n) { return __libc_memalign(PAGE, n); }

void *pvalloc(size_t n) { return __libc_memalign(PAGE, (n + PAGE - 1) & ~(PAGE - 1)); }

size_t malloc_usable_size(void *p) {
    static size_t (*next)(void *);
    size_t have;
    if (!p) return 0;
    if (give_back(p, &have)) return have;
    if (!next) next = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    return next ? next(p) : 0;
}
