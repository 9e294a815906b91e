package v1alpha1

// Cache policies shared by CachePool (the pool's defaults) and CachedVolume
// (per-volume overrides). They mirror the dataplane's bdev_adacache_create
// parameters (docs/dataplane.md, "Cached volumes"); enum values are spelled
// the Kubernetes way and mapped to the dataplane's names by the controller.
// The admission and eviction strings have one grammar here and in the
// dataplane's parser (dataplane/engine/src/names.rs): both are tested
// against test/testdata/policy-strings.tsv.

// WriteMode says when a write reaches Ceph. Dataplane: wt, wb, wa, pt.
// +kubebuilder:validation:Enum=WriteThrough;WriteBack;WriteAround;PassThrough
type WriteMode string

const (
	// WriteThrough writes to the cache and Ceph; the write completes when Ceph has it.
	WriteThrough WriteMode = "WriteThrough"
	// WriteBack completes a write once it is durable on the cache device;
	// cleaning writes it to Ceph later. Dirty data lives on one cache server.
	WriteBack WriteMode = "WriteBack"
	// WriteAround writes to Ceph only and invalidates cached copies; reads fill.
	WriteAround WriteMode = "WriteAround"
	// PassThrough bypasses the cache for reads and writes.
	PassThrough WriteMode = "PassThrough"
)

// AllocationMode says how cache blocks are sized. Dataplane: adaptive, fixed.
// +kubebuilder:validation:Enum=Adaptive;Fixed
type AllocationMode string

const (
	// Adaptive picks a block size per request among blockSizesKiB.
	Adaptive AllocationMode = "Adaptive"
	// Fixed uses the single size in blockSizesKiB.
	Fixed AllocationMode = "Fixed"
)

// FillSize says how a cache miss sizes the block it fills. Dataplane:
// request, locality.
// +kubebuilder:validation:Enum=Request;Locality
type FillSize string

const (
	// FillSizeRequest sizes blocks after the request that missed, at least
	// the smallest block size (AdaCache's rule).
	FillSizeRequest FillSize = "Request"
	// FillSizeLocality fills at least the floor size whose sampled shadow
	// cache hits most, so scattered small reads fill small blocks and
	// sequential ones prefetch. Meant with 4 among blockSizesKiB.
	FillSizeLocality FillSize = "Locality"
)

// BlockSizeKiB is a cache block size in KiB: a power of two from 4 (4 KiB)
// to 1024 (1 MiB).
// +kubebuilder:validation:XValidation:rule="self in [4, 8, 16, 32, 64, 128, 256, 512, 1024]",message="block sizes are in KiB and must be a power of two from 4 (4 KiB) to 1024 (1 MiB), e.g. 32"
type BlockSizeKiB int32

// WriteMissFill says what a write miss puts in the cache. Dataplane:
// sparse, head-tail, whole-block.
// +kubebuilder:validation:Enum=Sparse;HeadTail;WholeBlock
type WriteMissFill string

const (
	WriteMissFillSparse     WriteMissFill = "Sparse"
	WriteMissFillHeadTail   WriteMissFill = "HeadTail"
	WriteMissFillWholeBlock WriteMissFill = "WholeBlock"
)

// CleaningPolicyName chooses how dirty blocks are written back. Dataplane:
// nop, lazy, aggressive.
// +kubebuilder:validation:Enum=Nop;Lazy;Aggressive
type CleaningPolicyName string

const (
	CleaningNop        CleaningPolicyName = "Nop"
	CleaningLazy       CleaningPolicyName = "Lazy"
	CleaningAggressive CleaningPolicyName = "Aggressive"
)

// Cleaning configures write-back of dirty blocks (write-back mode only).
// +kubebuilder:validation:XValidation:rule="self.policy == 'Lazy' || (!has(self.stalenessMs) && !has(self.maxBatch) && !has(self.activityThresholdMs))",message="stalenessMs, maxBatch and activityThresholdMs apply only to policy Lazy; remove them or set policy: Lazy"
// +kubebuilder:validation:XValidation:rule="self.policy == 'Aggressive' || (!has(self.dirtyRatioPercent) && !has(self.batchBlocks))",message="dirtyRatioPercent and batchBlocks apply only to policy Aggressive; remove them or set policy: Aggressive"
// +kubebuilder:validation:XValidation:rule="self.policy != 'Nop' || !has(self.wakeUpMs)",message="wakeUpMs does not apply to policy Nop; remove it or choose Lazy or Aggressive"
type Cleaning struct {
	// Policy is the cleaning policy.
	// +required
	Policy CleaningPolicyName `json:"policy"`
	// StalenessMs: a dirty block older than this is cleaned (Lazy).
	// +optional
	// +kubebuilder:validation:Minimum=1
	StalenessMs *int32 `json:"stalenessMs,omitempty"`
	// WakeUpMs is how often the cleaner looks for work (Lazy, Aggressive).
	// +optional
	// +kubebuilder:validation:Minimum=1
	WakeUpMs *int32 `json:"wakeUpMs,omitempty"`
	// MaxBatch bounds the blocks cleaned per wake-up (Lazy).
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxBatch *int32 `json:"maxBatch,omitempty"`
	// ActivityThresholdMs: Lazy cleaning waits until the volume was idle this long.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ActivityThresholdMs *int32 `json:"activityThresholdMs,omitempty"`
	// DirtyRatioPercent: Aggressive cleaning starts above this share of dirty blocks.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	DirtyRatioPercent *int32 `json:"dirtyRatioPercent,omitempty"`
	// BatchBlocks bounds the blocks cleaned per wake-up (Aggressive).
	// +optional
	// +kubebuilder:validation:Minimum=1
	BatchBlocks *int32 `json:"batchBlocks,omitempty"`
}

// SeqCutoffPolicyName says when sequential streams bypass the cache.
// Dataplane: always, full, never.
// +kubebuilder:validation:Enum=Always;Full;Never
type SeqCutoffPolicyName string

const (
	SeqCutoffAlways SeqCutoffPolicyName = "Always"
	SeqCutoffFull   SeqCutoffPolicyName = "Full"
	SeqCutoffNever  SeqCutoffPolicyName = "Never"
)

// SeqCutoff lets long sequential streams bypass the cache.
type SeqCutoff struct {
	// Policy is the sequential cut-off policy.
	// +required
	Policy SeqCutoffPolicyName `json:"policy"`
	// ThresholdKiB is the stream length after which I/O bypasses the cache.
	// +optional
	// +kubebuilder:validation:Minimum=4
	ThresholdKiB *int32 `json:"thresholdKiB,omitempty"`
}

// CachePolicy holds the cache policies a volume runs with. In a CachePool
// they are the defaults; in a CachedVolume each set field overrides the pool.
type CachePolicy struct {
	// WriteMissFill says what a write miss puts in the cache.
	// +optional
	WriteMissFill WriteMissFill `json:"writeMissFill,omitempty"`
	// Admission is the admission policy in the dataplane's syntax: always,
	// nhit[:N], tinylfu[:strict] or size-aware.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^(always|nhit(:[1-9][0-9]{0,8})?|tinylfu(:strict)?|size-aware)$')",message="admission must be one of always, nhit, nhit:N (N a whole number from 1 to 999999999), tinylfu, tinylfu:strict, size-aware"
	Admission string `json:"admission,omitempty"`

	// The Eviction rule mirrors the dataplane's parse_eviction
	// (dataplane/engine/src/names.rs) so that a misspelt policy is refused
	// at admission rather than by bdev_adacache_create on every server;
	// "+" is written [+] because a CEL string has no \+ escape. MaxLength
	// bounds the regex's estimated cost, which the apiserver refuses
	// unbounded; 64 holds every candidate list without repeats
	// (auto:lru2+s3fifo+sieve+arc+wtinylfu is 35).

	// Eviction is the eviction policy in the dataplane's syntax: auto,
	// auto:P+P... (online choice among the listed policies P, each one of
	// lru2, s3fifo, sieve, arc, wtinylfu), lru2, lazy[:PARA[:K]], s3fifo,
	// sieve, arc or wtinylfu. When empty the dataplane's default applies:
	// auto, which starts with SIEVE and switches to the two-level LRU
	// when sampled shadow caches show a lasting lead.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^(auto(:(lru2|s3fifo|sieve|arc|wtinylfu)([+](lru2|s3fifo|sieve|arc|wtinylfu))*)?|lru2|s3fifo|sieve|arc|wtinylfu|lazy(:[1-9][0-9]{0,8}(:(0[.][0-9]*[1-9][0-9]*|[1-9][0-9]*([.][0-9]+)?))?)?)$')",message="eviction must be auto, auto:P+P... with each P one of lru2, s3fifo, sieve, arc, wtinylfu, or one of lru2, s3fifo, sieve, arc, wtinylfu, lazy, lazy:PARA, lazy:PARA:K with PARA a whole number from 1 to 999999999 and K a positive decimal such as 1 or 0.5"
	Eviction string `json:"eviction,omitempty"`
	// Cleaning configures write-back of dirty blocks.
	// +optional
	Cleaning *Cleaning `json:"cleaning,omitempty"`
	// SeqCutoff lets sequential streams bypass the cache.
	// +optional
	SeqCutoff *SeqCutoff `json:"seqCutoff,omitempty"`
}
