"""Replay a vramplan timeline through a model of PyTorch's CUDA caching
allocator and print the memory it would reserve.

    build/vramplan estimate MODEL --timeline --json [--set ...] > step.json
    python3 tools/allocator_replay.py step.json [--steps N]

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


class CachingAllocator:
    def __init__(self):
        self.free_blocks = {0: [], 1: []}  # pool -> sorted [(size, segment, offset, block)]
        self.segments = 0
        self.reserved = self.peak_reserved = 0
        self.allocated = self.peak_allocated = 0

    def _insert(self, block):
        bisect.insort(self.free_blocks[block.pool], (*block.key(), block))

    def _remove(self, block):
        blocks = self.free_blocks[block.pool]
        del blocks[bisect.bisect_left(blocks, block.key())]

    def malloc(self, size):
        pool = 0 if size <= SMALL_SIZE else 1
        blocks = self.free_blocks[pool]
        i = bisect.bisect_left(blocks, (size, -1, -1))
        if i < len(blocks):
            block = blocks[i][3]
            self._remove(block)
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
        if rest >= 512 if pool == 0 else rest > SMALL_SIZE:
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


def replay(events, steps):
    setup = [e for e in events if e["phase"] == "setup"]
    states = [e for e in setup if e["category"] in ("optimizer", "master")]
    resident = [e for e in setup if e["category"] not in ("optimizer", "master")]
    step = [e for e in events if e["phase"] != "setup"]
    first_update = next((i for i, e in enumerate(step) if e["phase"] == "optimizer"), len(step))
    allocator, live = CachingAllocator(), {}

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
    args = parser.parse_args()
    result = json.load(open(args.timeline))
    allocator, reserved = replay(result["timeline"], args.steps)
    per_gpu = result["per_gpu"]
    print(f"vramplan: allocated {per_gpu['peak_allocated_bytes'] / MIB:.0f} MiB, "
          f"reserved {per_gpu['peak_reserved_bytes'] / MIB:.0f} MiB (segments + fragmentation share)")
    print(f"replay:   allocated {allocator.peak_allocated / MIB:.0f} MiB, reserved after each step "
          + ", ".join(f"{r / MIB:.0f}" for r in reserved) + f" MiB ({allocator.segments} segments)")


if __name__ == "__main__":
    main()
