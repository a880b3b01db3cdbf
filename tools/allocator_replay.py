"""Replay a vramplan timeline through a model of PyTorch's CUDA caching
allocator and print the memory it would reserve.

    build/vramplan estimate MODEL --timeline --json [--set ...] > step.json
    python3 tools/allocator_replay.py step.json [--steps N] [--alloc-conf TEXT]

An analysis tool, not part of the engine (whose reservation is the peak's
segments plus a fragmentation share): it asks how much of a gap between
vramplan and a measurement the allocator's caching can explain. The rules
are those of c10/cuda/CUDACachingAllocator.cpp with default settings (one
stream, no expandable segments, no max_split_size): requests rounded to
512 bytes; up to 1 MiB from the small pool, carved from 2 MiB segments;
larger ones from the large pool, from 20 MiB segments below 10 MiB and a
segment of their own rounded to 2 MiB above; best fit (smallest free block,
then lowest address); a block is split when the rest is at least 512 bytes
(small pool) or more than 1 MiB (large pool); freed blocks merge with free
neighbours of the same segment; segments are never returned.

--alloc-conf takes PYTORCH_CUDA_ALLOC_CONF's options as c10's allocator
reads them (CUDACachingAllocator.cpp, AllocatorConfig.cpp):
max_split_size_mb (a block of that size or more serves no smaller request,
nor one 20 MiB or more below its size, and a request of that size or more
takes its block whole), roundup_power2_divisions (a request above 512 x N
bytes rounded up to the next of N equal cuts between two powers of two),
expandable_segments:True (one segment per pool that grows at its end by 2
MiB pages (small pool) or 20 MiB (large); the free block at the end is
taken last; every block splits when 512 bytes or more remain).

The timeline names no tensors, so a free is paired with the latest live
block of the same op and size. Setup (parameters, buffers) is replayed
first; optimizer states are made at the first step's optimizer phase, as
PyTorch's optimizers create them lazily; then the step runs --steps times.
"""
import argparse
import bisect
import json

MIB = 1 << 20
SMALL_SIZE, SMALL_BUFFER = 1 << 20, 2 << 20
LARGE_BUFFER, MIN_LARGE_ALLOC, ROUND_LARGE = 20 << 20, 10 << 20, 2 << 20


class Block:
    __slots__ = ("segment", "offset", "size", "free", "prev", "next", "pool")

    def __init__(self, segment, offset, size, pool):
        self.segment, self.offset, self.size, self.pool = segment, offset, size, pool
        self.free, self.prev, self.next = True, None, None

    def key(self):
        return (self.size, self.segment, self.offset)


def parse_alloc_conf(text):
    """The options as a dict: max_split (bytes or None), expandable (bool), divisions (int)."""
    conf = {"max_split": None, "expandable": False, "divisions": 1}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, _, value = (x.strip() for x in item.partition(":"))
        if name == "max_split_size_mb":
            if not value.isdigit() or int(value) < 20:
                raise SystemExit(f"max_split_size_mb: 20 MiB or more, not {value!r}")
            conf["max_split"] = int(value) * MIB
        elif name == "expandable_segments":
            if value not in ("True", "False"):
                raise SystemExit(f"expandable_segments: True or False, not {value!r}")
            conf["expandable"] = value == "True"
        elif name == "roundup_power2_divisions":
            if not value.isdigit() or int(value) < 1 or int(value) & (int(value) - 1):
                raise SystemExit(f"roundup_power2_divisions: a power of 2, not {value!r}")
            conf["divisions"] = int(value)
        else:
            raise SystemExit(f"--alloc-conf: {name!r} is not an option this tool knows")
    return conf


def round_request(size, divisions):
    if size < 512:
        return 512
    if divisions > 1 and size > 512 * divisions and size & (size - 1):
        low = 1 << (size.bit_length() - 1)  # the power of two below
        step = low // divisions
        return -(-size // step) * step
    return -(-size // 512) * 512


class CachingAllocator:
    def __init__(self, conf=None):
        self.conf = conf or parse_alloc_conf("")
        self.free_blocks = {0: [], 1: []}  # pool -> sorted [(size, segment, offset, block)]
        self.segments = 0
        self.reserved = self.peak_reserved = 0
        self.allocated = self.peak_allocated = 0
        self.grown = {}  # expandable: pool -> (its segment's first block, mapped bytes)

    def _insert(self, block):
        bisect.insort(self.free_blocks[block.pool], (*block.key(), block))

    def _remove(self, block):
        blocks = self.free_blocks[block.pool]
        del blocks[bisect.bisect_left(blocks, block.key())]

    def _candidate(self, size, pool):
        """The free block a request takes, or None."""
        blocks = self.free_blocks[pool]
        i = bisect.bisect_left(blocks, (size, -1, -1))
        if i == len(blocks):
            return None
        block = blocks[i][3]
        if self.conf["expandable"] and block.next is None and i + 1 < len(blocks):
            block = blocks[i + 1][3]  # the growing end counts as unbounded: a larger block first
        limit = self.conf["max_split"]
        if limit is not None and (size < limit <= block.size or (size >= limit and block.size >= size + LARGE_BUFFER)):
            return None
        return block

    def _grow(self, size, pool):
        """expandable_segments: the pool's segment mapped further at its end."""
        page = SMALL_BUFFER if pool == 0 else LARGE_BUFFER
        first, mapped = self.grown.get(pool, (None, 0))
        last = first  # the block at the mapped end (the one at offset 0 survives every merge)
        while last is not None and last.next is not None:
            last = last.next
        if last is not None and last.free:
            self._remove(last)
            more = -(-(size - last.size) // page) * page if size > last.size else 0
            last.size += more
            block = last
        else:
            if first is None:
                self.segments += 1
            more = -(-size // page) * page
            block = Block(first.segment if first else self.segments, mapped, more, pool)
            block.prev = last
            if last is not None:
                last.next = block
            first = first or block
        self.reserved += more
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.grown[pool] = (first, mapped + more)
        return block

    def malloc(self, size):
        size = round_request(size, self.conf["divisions"])
        pool = 0 if size <= SMALL_SIZE else 1
        block = self._candidate(size, pool)
        if block is not None:
            self._remove(block)
        elif self.conf["expandable"]:
            block = self._grow(size, pool)
        else:
            if pool == 0:
                segment = SMALL_BUFFER
            elif size < MIN_LARGE_ALLOC:
                segment = LARGE_BUFFER
            else:
                segment = -(-size // ROUND_LARGE) * ROUND_LARGE
            self.segments += 1
            block = Block(self.segments, 0, segment, pool)
            self.reserved += segment
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        limit = self.conf["max_split"]
        if pool == 0 or self.conf["expandable"]:
            split = rest >= 512
        else:
            split = rest > SMALL_SIZE and (limit is None or size < limit)
        if split:
            tail = Block(block.segment, block.offset + size, rest, pool)
            tail.prev, tail.next = block, block.next
            if block.next:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._insert(tail)
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def release(self, block):
        block.free = True
        self.allocated -= block.size
        if block.prev and block.prev.free:
            prev = block.prev
            self._remove(prev)
            prev.size += block.size
            prev.next = block.next
            if block.next:
                block.next.prev = prev
            block = prev
        if block.next and block.next.free:
            nxt = block.next
            self._remove(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next:
                nxt.next.prev = block
        self._insert(block)


def replay(events, steps, conf=None):
    setup = [e for e in events if e["phase"] == "setup"]
    states = [e for e in setup if e["category"] in ("optimizer", "master")]
    resident = [e for e in setup if e["category"] not in ("optimizer", "master")]
    step = [e for e in events if e["phase"] != "setup"]
    first_update = next((i for i, e in enumerate(step) if e["phase"] == "optimizer"), len(step))
    allocator, live = CachingAllocator(conf), {}

    def run(evs):
        for e in evs:
            key = (e["op"], abs(e["delta"]))
            if e["delta"] > 0:
                live.setdefault(key, []).append(allocator.malloc(e["delta"]))
                continue
            stack = live.get(key) or next((v for k, v in reversed(list(live.items())) if k[1] == key[1] and v), None)
            if not stack:
                raise SystemExit(f"a free the timeline never allocated: {e}")
            allocator.release(stack.pop())

    run(resident)
    run(step[:first_update])
    run(states)
    run(step[first_update:])
    reserved = [allocator.peak_reserved]
    for _ in range(steps - 1):
        run(step)
        reserved.append(allocator.peak_reserved)
    return allocator, reserved


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timeline", help="vramplan estimate --timeline --json output")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--alloc-conf", default="", help="PYTORCH_CUDA_ALLOC_CONF's options, as 'expandable_segments:True'")
    args = parser.parse_args()
    result = json.load(open(args.timeline))
    allocator, reserved = replay(result["timeline"], args.steps, parse_alloc_conf(args.alloc_conf))
    per_gpu = result["per_gpu"]
    print(f"vramplan: allocated {per_gpu['peak_allocated_bytes'] / MIB:.0f} MiB, "
          f"reserved {per_gpu['peak_reserved_bytes'] / MIB:.0f} MiB (segments + fragmentation share)")
    print(f"replay:   allocated {allocator.peak_allocated / MIB:.0f} MiB, reserved after each step "
          + ", ".join(f"{r / MIB:.0f}" for r in reserved) + f" MiB ({allocator.segments} segments)")


if __name__ == "__main__":
    main()
