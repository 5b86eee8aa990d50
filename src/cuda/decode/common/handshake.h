/* The producer / consumer handshake of the sm_90a NVFP4 kernels (wide and narrow): the threads
 * of a producer pair and the consumer warpgroups that meet on the named barriers below. */
#ifndef MLAKV_CUDA_DECODE_COMMON_HANDSHAKE_H
#define MLAKV_CUDA_DECODE_COMMON_HANDSHAKE_H

namespace mlakv::decode {

constexpr int kHandshakeThreads = 384;
/* named barriers (384 threads; one CTA per head block): FULL[b] both producer halves ->
 * warpgroup 1, EMPTY[b] warpgroup 1 (P V of the buffer's tile done) -> both producer halves.
 * P(i) and alpha(i) (warpgroup 1 -> 2) go through an mbarrier per tile parity (racecheck
 * reported the named-barrier arrive / sync pair for that handoff), the epilogue's row
 * statistics through a third. */
enum {
    kBarFull = 2,        /* + b */
    kBarEmpty = 4,       /* + b */
    kBarEpilogue = 6,    /* + consumer warpgroup: its epilogue's staged rows */
    kBarEpilogueAll = 8  /* all 384 threads: the producers' last stores before the staging */
};

/* true: nvfp4_ds_mla computes its record offsets with the division, not the host's multiplier
 * (record_offset) in the producers: with the multiplier ptxas's schedule of the wide-head
 * kernel measured 2.5-2.7 % slower, and moving its registers to 112 / 192 / 200 did not
 * recover it */
constexpr bool kNvfp4DsMlaOffsetDiv = true;

} // namespace mlakv::decode

#endif
