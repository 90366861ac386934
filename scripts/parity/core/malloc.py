"""glibc's allocator setting for the processes that train: the Rust runners
(``parity.train.rust``) and the warm server the PyTorch jobs are forked from
(``parity.core.warm``)."""

#: Blocks up to 32 MiB come from the heap, and freed memory stays in the process. By default
#: glibc serves every block over 128 KiB with its own mmap and returns it with munmap, so
#: each training step faulted its tensors' pages in afresh: the scale MLP's candle run (200
#: steps, record nothing) spent 10.2 s of system time beside 7.4 s of user time, and 0.08 s
#: with these, at the same peak memory; its PyTorch run took 2.73 s against 3.23 s
#: (docs/performance.md, "Recording overhead"). Where a block lives changes no number. A
#: ``GLIBC_TUNABLES`` in the environment wins over it.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295"
