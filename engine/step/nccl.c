/* nccl.c — NCCL's device buffers per process group. NCCL allocates them
 * itself (cuMem), outside PyTorch's caching allocator: nvidia-smi counts
 * them, max_memory_reserved does not. Every constant below is NCCL 2.30.7's
 * (github.com/NVIDIA/nccl, makefiles/version.mk), file named beside it.
 * Since NCCL 2.22 a communicator connects an algorithm when it first runs
 * one (NCCL_RUNTIME_CONNECT, src/init.cc; src/group.cc
 * ncclCollPreconnect): what is counted here is what a training step's
 * collectives connect. docs/how-it-works.md, "Beyond the tensors". */
#include "nccl.h"

#include "estimate.h"
#include "framework.h"

#include <string.h>

#define MIB (1024ull * 1024ull)

/* One connection's FIFO per protocol (src/init.cc DEFAULT_LL_BUFFSIZE,
 * DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE; src/include/device.h):
 * LL = NCCL_LL_LINES_PER_THREAD 8 x NCCL_LL_MAX_NTHREADS 512 x NCCL_STEPS 8
 * x 16-byte lines; LL128 = NCCL_LL128_ELEMS_PER_THREAD 120 x
 * NCCL_LL128_MAX_NTHREADS 640 x 8 steps x 8 bytes; SIMPLE = NCCL_BUFFSIZE,
 * 4 MiB. */
#define LL_BYTES (8ull * 512ull * 8ull * 16ull)
#define LL128_BYTES (120ull * 640ull * 8ull * 8ull)
#define SIMPLE_BYTES (4ull * MIB)
/* struct ncclSendMem / ncclRecvMem, each padded to MEM_ALIGN 4096
 * (src/include/comm.h) */
#define CONN_MEM_BYTES 4096ull
/* every connection buffer rounded to CUDA_IPC_MIN, 2 MiB (src/include/comm.h;
 * ALIGN_SIZE in src/transport/p2p.cc p2pSendSetup / p2pRecvSetup and
 * net.cc's ncclP2pAllocateShareableBuffer) */
#define GRANULE (2ull * MIB)
/* NVLS (src/transport/nvls.cc): NVLS_NCHANNELS_SM90 16,
 * NVLS_NCHANNELS_SM100_NVL 24 (one node), NVLS_NCHANNELS_SM100 32 (several),
 * NCCL_NVLS_CHUNKSIZE 128 KiB per step, credits 64 bytes per channel,
 * direction and head (ncclNvlsSetup's memSize) */
#define NVLS_CHUNK (128ull * 1024ull)
#define NVLS_CREDIT 64ull
/* network send/recv (src/transport/net.cc): shared buffers of
 * NCCL_SHARED_STEPS 16 x the P2P chunk per p2p channel, one pool each way
 * (sharedNetBuffersInit); the chunk is NCCL_P2P_NET_CHUNKSIZE 128 KiB over
 * several nodes (src/init.cc computeBuffSizes) */
#define NET_SHARED_STEPS 16ull
#define NET_P2P_CHUNK (128ull * 1024ull)
/* MAXCHANNELS (src/include/device.h), NCCL_MAX_P2P_NCHANNELS' default */
#define MAX_CHANNELS 64u
/* a tree node's peers across nodes: its parent and NCCL_MAX_TREE_ARITY_TOP 2
 * children (src/include/device.h; the double binary tree, src/graph/trees.cc) */
#define TREE_NET_PEERS 3ull

static uint64_t granules(uint64_t bytes) { return (bytes + GRANULE - 1) / GRANULE * GRANULE; }

static unsigned pow2_up(unsigned v) {
    unsigned p = 1;
    while (p < v) p <<= 1;
    return p;
}

/* The device memory of one direction of one connection on one channel. */
typedef struct {
    uint64_t send, recv;
} vp_conn;

/* Inside a node (src/transport/p2p.cc): the receiver holds ncclRecvMem and
 * the LL and LL128 FIFOs, the SIMPLE one too unless the sender reads (P2P
 * read: both GPUs compute capability 8.0 over NVLink, src/graph/paths.cc
 * ncclTopoCheckP2p), when the sender holds it after its ncclSendMem. H100:
 * 10 MiB and 2 MiB, the two sizes NCCL_DEBUG_SUBSYS=ALLOC logs on 8 x H100
 * (10485760 and 2097152, NVIDIA/nccl#1685). */
static vp_conn p2p_connection(bool read) {
    vp_conn c;
    c.send = granules(CONN_MEM_BYTES + (read ? SIMPLE_BYTES : 0));
    c.recv = granules(CONN_MEM_BYTES + LL_BYTES + LL128_BYTES + (read ? 0 : SIMPLE_BYTES));
    return c;
}

/* Between nodes with GPUDirect RDMA (src/transport/net.cc sendProxyConnect,
 * recvProxyConnect, a ring's or tree's dedicated buffers): the sender's LL128
 * and SIMPLE FIFOs in device memory (LL in host memory), the receiver's all
 * three; ncclSendMem/ncclRecvMem in host memory. */
static vp_conn net_connection(void) {
    vp_conn c = {granules(LL128_BYTES + SIMPLE_BYTES), granules(LL_BYTES + LL128_BYTES + SIMPLE_BYTES)};
    return c;
}

/* What the rank's node and GPU give NCCL. */
typedef struct {
    unsigned channels;     /* collective channels (ring and tree) */
    unsigned p2p_channels; /* p2pnChannels */
    unsigned per_peer;     /* p2p channels per peer inside a node */
    bool nvlink, read, nvls;
    unsigned nvls_channels_one_node, nvls_channels_nodes;
    unsigned gpus_per_node;
    vp_conn p2p, net;
} vp_nccl_node;

/* Behind NVSwitch (HGX/DGX boards): A100 SXM's 600 GB/s NVLink 3, Hopper's
 * and Blackwell's 900 GB/s and more. Not V100's hybrid cube mesh (no
 * switch), nor the H100 NVL pair's 600 GB/s bridge. */
static bool nvswitch(const vp_gpu *gpu) {
    if (!gpu) return false;
    return (gpu->compute_major == 8 && gpu->interconnect_gbps >= 600) ||
           (gpu->compute_major >= 9 && gpu->interconnect_gbps >= 900);
}

/* NCCL's channels per communicator when the recipe gives none: 24 on an
 * NVLink node ("24 coll channels", NVIDIA/nccl#1781), 2 over PCIe ("2 coll
 * channels", ParCIS/Chimera#2; and between nodes over InfiniBand,
 * NVIDIA/nccl-tests#133). NVLink: a GPU-to-GPU bandwidth above PCIe 5.0
 * x16's 128 GB/s both ways (the catalog's interconnect_gbps). */
static vp_nccl_node node_of(const vp_recipe *r, const vp_gpu *gpu) {
    vp_nccl_node n;
    memset(&n, 0, sizeof n);
    n.nvlink = gpu && gpu->interconnect_gbps > 128;
    n.channels = r->nccl_channels ? r->nccl_channels : n.nvlink ? 24 : 2;
    /* ncclTopoComputeP2pChannels (src/graph/paths.cc): min(nChannels,
     * MAX_P2P_NCHANNELS) rounded up to a power of two; per peer inside a
     * node the least over the node's pairs of 2 x the NVLinks between
     * them (ncclTopoGetNchannels), 2 over PCIe, rounded up and capped by
     * p2pnChannels: behind NVSwitch (18 links on H100, 12 on A100) that is
     * all of them, the 32 channels per pair NVIDIA/nccl#1685 logs on 8 x
     * H100; without a switch some pair has one link or none: 2. */
    n.p2p_channels = pow2_up(n.channels < MAX_CHANNELS ? n.channels : MAX_CHANNELS);
    n.per_peer = nvswitch(gpu) ? n.p2p_channels : (n.p2p_channels < 2 ? n.p2p_channels : 2);
    n.read = n.nvlink && gpu && gpu->compute_major == 8;
    /* NVLS needs NVSwitch and compute capability 9.0 or later (src/graph/
     * search.cc: the NVLS pattern is searched only with an NVS node and
     * ccMin >= 90) and multicast (NCCL_NVLS_ENABLE 2: where the device
     * supports it, nvls.cc ncclNvlsInit). */
    n.nvls = r->nccl_nvls && nvswitch(gpu) && gpu->compute_major >= 9;
    n.nvls_channels_one_node = gpu && gpu->compute_major >= 10 ? 24 : 16;
    n.nvls_channels_nodes = gpu && gpu->compute_major >= 10 ? 32 : 16;
    unsigned gpus = r->dp * r->tp * (r->pp ? r->pp : 1) * r->cp;
    n.gpus_per_node = r->gpus_per_node ? r->gpus_per_node : (gpus < 8 ? gpus : 8);
    if (!n.gpus_per_node) n.gpus_per_node = 1;
    n.p2p = p2p_connection(n.read);
    n.net = net_connection();
    return n;
}

/* A group of `ranks` ranks `stride` apart: how many share the rank's node
 * (ranks are numbered node by node), and how many nodes it spans. */
static void place(vp_nccl_group *g, unsigned ranks, unsigned stride, const vp_nccl_node *n) {
    unsigned local = stride >= n->gpus_per_node ? 1 : n->gpus_per_node / stride;
    if (local > ranks) local = ranks;
    if (!local) local = 1;
    g->ranks = ranks;
    g->local_ranks = local;
    g->nodes = (ranks + local - 1) / local;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* A collective group: rings on every channel (one send and one receive
 * connection each, ncclTransportRingConnect), trees when it spans nodes,
 * NVLS on NVSwitch. */
static void collective(vp_nccl_group *g, const vp_nccl_node *n) {
    uint64_t c = n->channels, p2p_pair = n->p2p.send + n->p2p.recv, net_pair = n->net.send + n->net.recv;
    g->pattern = "collective";
    g->channels = n->channels;
    if (g->nodes == 1) {
        g->ring_bytes = c * p2p_pair;
    } else if (g->local_ranks == 1) {
        g->ring_bytes = c * net_pair;
    } else {
        /* each channel's ring leaves the node at one rank and enters at
         * another: the busiest rank does so on ceil(C / local) channels */
        uint64_t crossing = ceil_div(c, g->local_ranks);
        g->ring_bytes = c * p2p_pair + crossing * (n->net.send - n->p2p.send) + crossing * (n->net.recv - n->p2p.recv);
    }
    if (g->nodes > 1) {
        /* a tree all-reduce (NCCL's choice across nodes for small and
         * medium sizes: dist.barrier's, a gradient norm's) connects each
         * channel's tree both ways (ncclTransportTreeConnect): inside the
         * node a chain, assumed in the ring's order, adding the reverse
         * send and receive; at the node's head its tree peers across
         * nodes, each both ways. A connection is per channel and peer
         * (channel->peers[peer]), so what the ring already connected is
         * not connected again: over two nodes the one peer is the ring's
         * neighbour both ways, over three the two are its next and
         * previous (one send and one receive shared); from four on the
         * tree's peers are taken as others than the ring's. */
        uint64_t peers = g->nodes - 1 < TREE_NET_PEERS ? g->nodes - 1 : TREE_NET_PEERS;
        uint64_t shared = g->nodes <= 3 ? 1 : 0;
        uint64_t heads = ceil_div(c, g->local_ranks);
        g->tree_bytes = (g->local_ranks > 1 ? c * p2p_pair : 0) + heads * (peers - shared) * net_pair;
    }
    if (n->nvls && g->local_ranks > 1) {
        /* ncclNvlsBufferSetup: nvlsChannels x 2 (reduce, broadcast) x
         * NCCL_STEPS x chunk x nHeads, one head per local rank (NVLS's
         * graph has up to one channel per GPU, src/graph/search.cc), plus
         * the credits ncclNvlsSetup allocates; each in 2 MiB granules */
        uint64_t heads = g->local_ranks;
        uint64_t channels = g->nodes > 1 ? n->nvls_channels_nodes : n->nvls_channels_one_node;
        g->nvls_bytes = granules(channels * 2 * 8 * NVLS_CHUNK * heads) + granules(channels * 2 * NVLS_CREDIT * heads);
    }
}

/* Point to point: `sends` peers the rank sends to and `recvs` it receives
 * from, each over the channels per peer; peers on other nodes share the
 * network's two pools (send, receive) instead (net.cc, /Shared in NCCL's
 * logs). */
static void point_to_point(vp_nccl_group *g, const vp_nccl_node *n, const char *pattern, unsigned peers,
                           unsigned sends, unsigned recvs) {
    g->pattern = pattern;
    g->peers = peers;
    g->channels = n->per_peer;
    unsigned local_peers = g->local_ranks - 1;
    unsigned local_sends = sends < local_peers ? sends : local_peers;
    unsigned local_recvs = recvs < local_peers ? recvs : local_peers;
    g->p2p_bytes = (uint64_t)n->per_peer * (local_sends * n->p2p.send + local_recvs * n->p2p.recv);
    if (sends > local_sends || recvs > local_recvs)
        g->p2p_bytes += 2 * granules(n->p2p_channels * NET_SHARED_STEPS * NET_P2P_CHUNK);
}

static vp_nccl_group *add(vp_nccl *out, const char *name) {
    vp_nccl_group *g = &out->groups[out->n++];
    memset(g, 0, sizeof *g);
    g->name = name;
    return g;
}

void vp_nccl_buffers(const vp_recipe *r, const vp_gpu *gpu, unsigned stage, vp_nccl *out) {
    memset(out, 0, sizeof *out);
    vp_nccl_node n = node_of(r, gpu);
    const vp_framework_kind *fw = vp_framework_of(r);
    unsigned pp = r->pp ? r->pp : 1;
    /* the ranks' order, innermost first (Megatron's tp-cp-ep-dp-pp,
     * torchtitan's mesh pp, dp_replicate, dp_shard, cp, tp) */
    unsigned tp_stride = 1, cp_stride = r->tp, dp_stride = r->tp * r->cp, pp_stride = r->tp * r->cp * r->dp;
    if (r->tp > 1) {
        vp_nccl_group *g = add(out, "tp");
        place(g, r->tp, tp_stride, &n);
        collective(g, &n);
    }
    if (r->cp > 1) {
        vp_nccl_group *g = add(out, "cp");
        place(g, r->cp, cp_stride, &n);
        if (fw->sdpa_ring) {
            collective(g, &n); /* PyTorch's ring rotates K and V by all-gather (sdpa_ring_attention.c) */
        } else {
            /* Transformer Engine's p2p ring: K and V (and dK, dV in backward) to the next rank, from the previous */
            point_to_point(g, &n, "neighbours", r->cp > 2 ? 2 : 1, 1, 1);
        }
    }
    if (r->ep > 1) {
        /* the token dispatcher's all-to-all: every peer both ways */
        vp_nccl_group *g = add(out, "ep");
        place(g, r->ep, r->etp ? r->etp : r->tp, &n);
        point_to_point(g, &n, "all-to-all", r->ep - 1, r->ep - 1, r->ep - 1);
    }
    if (r->dp > 1) {
        unsigned group = vp_framework_shard_group(r);
        bool hybrid = (r->framework == VP_FRAMEWORK_FSDP && r->fsdp == VP_FSDP_HYBRID_SHARD) || fw->hsdp;
        if (hybrid && group > 1 && group < r->dp) {
            vp_nccl_group *g = add(out, "dp_shard");
            place(g, group, dp_stride, &n);
            collective(g, &n);
            g = add(out, "dp_replicate");
            place(g, r->dp / group, dp_stride * group, &n);
            collective(g, &n);
        } else {
            vp_nccl_group *g = add(out, "dp");
            place(g, r->dp, dp_stride, &n);
            collective(g, &n);
        }
    }
    if (pp > 1) {
        /* activations forward to the next stage, gradients back to the
         * previous; the first and last stages have one neighbour, but
         * under an interleaved schedule the last sends its chunks on to
         * the first */
        bool wraps = vp_pp_kind(r) == VP_PP_INTERLEAVED;
        unsigned peers = pp == 2 ? 1 : wraps || (stage > 0 && stage + 1 < pp) ? 2 : 1;
        vp_nccl_group *g = add(out, "pp");
        place(g, pp, pp_stride, &n);
        point_to_point(g, &n, "neighbours", peers, peers, peers);
    }
    for (unsigned i = 0; i < out->n; i++) {
        vp_nccl_group *g = &out->groups[i];
        g->bytes = g->ring_bytes + g->tree_bytes + g->nvls_bytes + g->p2p_bytes;
        out->bytes += g->bytes;
    }
}
