// The emulated accelerator of the test suite: torch's PrivateUse1 backend,
// renamed to "emu" by device.py, with host memory underneath and every kernel
// run on the CPU. It exists so that the family's device-generic code paths
// (memory statistics, out-of-memory handling, per-device random generators,
// pinned memory, device guards, two devices) run on machines without a GPU.
//
// Pieces, in order: configuration read once from the environment; the current
// device per host thread; the device allocator with exact per-device
// statistics and a per-process memory fraction; the pinned host allocator; the
// random generators; the device guard; the PrivateUse1 hooks; the native
// kernels and the boxed CPU fallback; autocast; and the small Python module
// `_C`.

#include <Python.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Generator.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

// Declared here rather than included with <ATen/autocast_mode.h>, which pulls
// in every operator's declaration and slows the build considerably.
namespace at::autocast {
TORCH_API at::ScalarType get_autocast_dtype(at::DeviceType device_type);
} // namespace at::autocast

namespace {

constexpr c10::DeviceType kEmu = c10::DeviceType::PrivateUse1;
constexpr size_t kAlignment = 64; // what c10's CPU allocator guarantees
constexpr size_t kSmallPoolLimit = size_t(1) << 20; // CUDA's small-pool bound
constexpr int64_t kMaxDevices = 64;

// ---------------------------------------------------------------------------
// Configuration: read once, at first use. device.py validates the variables
// before the module loads and reports bad values; here they only fall back.

int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    return fallback;
  }
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < lo || value > hi) {
    return fallback;
  }
  return value;
}

c10::DeviceIndex device_count() {
  static const auto count = static_cast<c10::DeviceIndex>(
      env_int("PYTEST_TORCH_EMULATOR_DEVICES", 2, 0, kMaxDevices));
  return count;
}

size_t total_memory() {
  static const size_t total = static_cast<size_t>(env_int(
                                  "PYTEST_TORCH_EMULATOR_MEMORY_MIB",
                                  8192,
                                  1,
                                  int64_t(1) << 30)) *
      (size_t(1) << 20);
  return total;
}

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index >= 0 && index < device_count(),
      "emu: invalid device index ",
      static_cast<int>(index),
      " (this process has ",
      static_cast<int>(device_count()),
      " emulated devices)");
}

// Like CUDA, each host thread has its own current device and starts at 0.
thread_local c10::DeviceIndex tls_current_device = 0;

c10::DeviceIndex current_device() {
  return tls_current_device;
}

void set_current_device(c10::DeviceIndex index) {
  if (index < 0) {
    return; // -1 means "the current device" throughout c10
  }
  check_index(index);
  tls_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  const auto previous = tls_current_device;
  set_current_device(index);
  return previous;
}

std::string format_size(uint64_t bytes) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  if (bytes < (uint64_t(1) << 10)) {
    out << bytes << " bytes";
  } else if (bytes < (uint64_t(1) << 20)) {
    out << static_cast<double>(bytes) / (uint64_t(1) << 10) << " KiB";
  } else if (bytes < (uint64_t(1) << 30)) {
    out << static_cast<double>(bytes) / (uint64_t(1) << 20) << " MiB";
  } else {
    out << static_cast<double>(bytes) / (uint64_t(1) << 30) << " GiB";
  }
  return out.str();
}

void* host_alloc(size_t nbytes) {
  void* data = nullptr;
  if (posix_memalign(&data, kAlignment, nbytes) != 0) {
    return nullptr;
  }
  return data;
}

// ---------------------------------------------------------------------------
// Device memory. No caching and no rounding: every request is one host
// allocation, so allocated == reserved == active == requested, to the byte.

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

struct DeviceState {
  std::mutex mutex;
  DeviceStats stats;
  double fraction = 1.0;
};

// The registries below are created on first use and never destroyed: tensors
// and generators may outlive static destruction at interpreter exit.
std::vector<DeviceState>& device_states() {
  static auto* states = new std::vector<DeviceState>(
      static_cast<size_t>(std::max<c10::DeviceIndex>(device_count(), 1)));
  return *states;
}

DeviceState& state_of(c10::DeviceIndex index) {
  check_index(index);
  return device_states()[static_cast<size_t>(index)];
}

struct Block {
  size_t size;
  c10::DeviceIndex device;
};

// Live allocations by address, for the deleter (which only gets the pointer)
// and for getDeviceFromPtr (which may get a pointer into a block).
struct BlockRegistry {
  std::mutex mutex;
  std::map<uintptr_t, Block> blocks;
};

BlockRegistry& block_registry() {
  static auto* registry = new BlockRegistry();
  return *registry;
}

template <typename F>
void apply_to_pools(size_t nbytes, F f) {
  f(static_cast<size_t>(StatType::AGGREGATE));
  f(static_cast<size_t>(
      nbytes <= kSmallPoolLimit ? StatType::SMALL_POOL : StatType::LARGE_POOL));
}

void record_alloc(DeviceStats& stats, size_t nbytes) {
  apply_to_pools(nbytes, [&](size_t pool) {
    stats.allocation[pool].increase(1);
    stats.segment[pool].increase(1);
    stats.active[pool].increase(1);
    stats.allocated_bytes[pool].increase(nbytes);
    stats.reserved_bytes[pool].increase(nbytes);
    stats.active_bytes[pool].increase(nbytes);
    stats.requested_bytes[pool].increase(nbytes);
  });
  stats.num_device_alloc += 1;
}

void record_free(DeviceStats& stats, size_t nbytes) {
  apply_to_pools(nbytes, [&](size_t pool) {
    stats.allocation[pool].decrease(1);
    stats.segment[pool].decrease(1);
    stats.active[pool].decrease(1);
    stats.allocated_bytes[pool].decrease(nbytes);
    stats.reserved_bytes[pool].decrease(nbytes);
    stats.active_bytes[pool].decrease(nbytes);
    stats.requested_bytes[pool].decrease(nbytes);
  });
  stats.num_device_free += 1;
}

void free_device_memory(void* data) {
  if (data == nullptr) {
    return;
  }
  Block block{};
  {
    auto& registry = block_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto it = registry.blocks.find(reinterpret_cast<uintptr_t>(data));
    TORCH_INTERNAL_ASSERT(
        it != registry.blocks.end(), "emu: freeing unknown pointer");
    block = it->second;
    registry.blocks.erase(it);
  }
  {
    auto& state = state_of(block.device);
    std::lock_guard<std::mutex> lock(state.mutex);
    record_free(state.stats, block.size);
  }
  std::free(data);
}

class EmuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = current_device();
    auto& state = state_of(device);
    void* data = nullptr;
    if (nbytes > 0) {
      std::lock_guard<std::mutex> lock(state.mutex);
      const uint64_t total = total_memory();
      const uint64_t allocated =
          state.stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)]
              .current;
      const auto allowed = static_cast<uint64_t>(state.fraction * total);
      if (allocated + nbytes > allowed ||
          (data = host_alloc(nbytes)) == nullptr) {
        state.stats.num_ooms += 1;
        TORCH_CHECK_WITH(
            OutOfMemoryError,
            false,
            "emu out of memory. Tried to allocate ",
            format_size(nbytes),
            ". Device ",
            static_cast<int>(device),
            " has a total capacity of ",
            format_size(total),
            " of which ",
            format_size(total - allocated),
            " is free. ",
            format_size(allowed),
            " allowed by the per-process memory fraction ",
            state.fraction,
            ". Of the allocated memory ",
            format_size(allocated),
            " is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
            "unallocated (the emulated accelerator does not cache).");
      }
      record_alloc(state.stats, nbytes);
      auto& registry = block_registry();
      std::lock_guard<std::mutex> registry_lock(registry.mutex);
      registry.blocks[reinterpret_cast<uintptr_t>(data)] =
          Block{nbytes, device};
    }
    return {data, data, &free_device_memory, c10::Device(kEmu, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_device_memory;
  }

  void copy_data(void* dest, const void* src, std::size_t count)
      const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}

  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/)
      override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    auto& state = state_of(resolve(device));
    std::lock_guard<std::mutex> lock(state.mutex);
    return state.stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    auto& state = state_of(resolve(device));
    std::lock_guard<std::mutex> lock(state.mutex);
    for_each_stat(state.stats, [](c10::CachingAllocator::Stat& s) {
      s.reset_accumulated();
    });
    state.stats.num_alloc_retries = 0;
    state.stats.num_ooms = 0;
    state.stats.num_sync_all_streams = 0;
    state.stats.num_device_alloc = 0;
    state.stats.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    auto& state = state_of(resolve(device));
    std::lock_guard<std::mutex> lock(state.mutex);
    for_each_stat(
        state.stats, [](c10::CachingAllocator::Stat& s) { s.reset_peak(); });
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    auto& state = state_of(resolve(device));
    std::lock_guard<std::mutex> lock(state.mutex);
    const auto allocated = static_cast<size_t>(
        state.stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)]
            .current);
    const auto total = total_memory();
    return {allocated < total ? total - allocated : 0, total};
  }

  static void set_fraction(c10::DeviceIndex device, double fraction) {
    TORCH_CHECK_VALUE(
        fraction >= 0.0 && fraction <= 1.0,
        "invalid fraction: ",
        fraction,
        ". Please set within [0, 1].");
    auto& state = state_of(resolve(device));
    std::lock_guard<std::mutex> lock(state.mutex);
    state.fraction = fraction;
  }

  static double get_fraction(c10::DeviceIndex device) {
    auto& state = state_of(resolve(device));
    std::lock_guard<std::mutex> lock(state.mutex);
    return state.fraction;
  }

 private:
  static c10::DeviceIndex resolve(c10::DeviceIndex device) {
    return device < 0 ? current_device() : device;
  }

  template <typename F>
  static void for_each_stat(DeviceStats& stats, F f) {
    for (auto* array :
         {&stats.allocation,
          &stats.segment,
          &stats.active,
          &stats.inactive_split,
          &stats.allocated_bytes,
          &stats.reserved_bytes,
          &stats.active_bytes,
          &stats.inactive_split_bytes,
          &stats.requested_bytes}) {
      for (auto& stat : *array) {
        f(stat);
      }
    }
    f(stats.oversize_allocations);
    f(stats.oversize_segments);
  }
};

EmuAllocator& device_allocator() {
  static auto* allocator = new EmuAllocator();
  return *allocator;
}

REGISTER_ALLOCATOR(kEmu, &device_allocator());

// ---------------------------------------------------------------------------
// Pinned memory: ordinary host memory whose blocks are remembered, so that
// is_pinned() tells it apart from pageable CPU memory as it does on CUDA.

struct PinnedRegistry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> blocks;
  at::HostStats stats;
};

PinnedRegistry& pinned_registry() {
  static auto* registry = new PinnedRegistry();
  return *registry;
}

void free_pinned_memory(void* data) {
  if (data == nullptr) {
    return;
  }
  {
    auto& registry = pinned_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto it = registry.blocks.find(reinterpret_cast<uintptr_t>(data));
    TORCH_INTERNAL_ASSERT(
        it != registry.blocks.end(), "emu: freeing unknown pinned block");
    registry.stats.active_requests.decrease(1);
    registry.stats.active_bytes.decrease(it->second);
    registry.stats.allocations.decrease(1);
    registry.stats.allocated_bytes.decrease(it->second);
    registry.stats.num_host_free += 1;
    registry.blocks.erase(it);
  }
  std::free(data);
}

bool is_pinned_pointer(const void* data) {
  if (data == nullptr) {
    return false;
  }
  const auto address = reinterpret_cast<uintptr_t>(data);
  auto& registry = pinned_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto it = registry.blocks.upper_bound(address);
  if (it == registry.blocks.begin()) {
    return false;
  }
  --it;
  return address < it->first + it->second;
}

class EmuHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nullptr;
    if (nbytes > 0) {
      data = host_alloc(nbytes);
      TORCH_CHECK_WITH(
          OutOfMemoryError,
          data != nullptr,
          "emu: could not allocate ",
          format_size(nbytes),
          " of pinned host memory");
      auto& registry = pinned_registry();
      std::lock_guard<std::mutex> lock(registry.mutex);
      registry.blocks[reinterpret_cast<uintptr_t>(data)] = nbytes;
      registry.stats.active_requests.increase(1);
      registry.stats.active_bytes.increase(nbytes);
      registry.stats.allocations.increase(1);
      registry.stats.allocated_bytes.increase(nbytes);
      registry.stats.num_host_alloc += 1;
    }
    return {data, data, &free_pinned_memory, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_pinned_memory;
  }

  void copy_data(void* dest, const void* src, std::size_t count)
      const override {
    std::memcpy(dest, src, count);
  }

  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/)
      override {
    return true; // kernels are synchronous: nothing is ever in flight
  }

  void empty_cache() override {}

  at::HostStats get_stats() override {
    auto& registry = pinned_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    return registry.stats;
  }

  void reset_accumulated_stats() override {
    auto& registry = pinned_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto* stat : stats_of(registry)) {
      stat->reset_accumulated();
    }
    registry.stats.num_host_alloc = 0;
    registry.stats.num_host_free = 0;
  }

  void reset_peak_stats() override {
    auto& registry = pinned_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto* stat : stats_of(registry)) {
      stat->reset_peak();
    }
  }

 private:
  static std::array<c10::CachingAllocator::Stat*, 4> stats_of(
      PinnedRegistry& registry) {
    return {
        &registry.stats.active_requests,
        &registry.stats.active_bytes,
        &registry.stats.allocations,
        &registry.stats.allocated_bytes};
  }
};

EmuHostAllocator& host_allocator() {
  static auto* allocator = new EmuHostAllocator();
  return *allocator;
}

REGISTER_HOST_ALLOCATOR(kEmu, &host_allocator());

// ---------------------------------------------------------------------------
// Random generators. Each emu generator owns a CPU generator and delegates
// seed and state to it; the fallback hands that CPU generator to the CPU
// kernels, so random ops on emu tensors draw from the emu device's stream and
// never touch the CPU default generator.
//
// Seeds are scrambled on their way into the CPU generator, so that the CPU and
// an emu device seeded alike draw different numbers, as they would on a real
// device (a test could not otherwise tell which generator a draw came from);
// current_seed() unscrambles, so the seed reads back as it was set.
constexpr uint64_t kSeedScramble = 0x9E3779B97F4A7C15ULL;

class EmuGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit EmuGeneratorImpl(c10::DeviceIndex index)
      : c10::GeneratorImpl(
            c10::Device(kEmu, index),
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu_(at::detail::createCPUGenerator(
            c10::default_rng_seed_val ^ kSeedScramble)) {}

  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    cpu_.set_current_seed(seed ^ kSeedScramble);
  }
  void set_offset(uint64_t offset) override {
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    cpu_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    return cpu_.get_offset();
  }
  uint64_t current_seed() const override {
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    return cpu_.current_seed() ^ kSeedScramble;
  }
  uint64_t seed() override {
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    return cpu_.seed() ^ kSeedScramble;
  }
  void set_state(const c10::TensorImpl& new_state) override {
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    return cpu_.unsafeGetGeneratorImpl()->get_state();
  }

  static c10::DeviceType device_type() {
    return kEmu;
  }

  const at::Generator& cpu_generator() const {
    return cpu_;
  }

 private:
  EmuGeneratorImpl* clone_impl() const override {
    auto* copy = new EmuGeneratorImpl(device_.index());
    std::lock_guard<std::mutex> lock(cpu_.mutex());
    copy->cpu_ = cpu_.clone();
    return copy;
  }

  // Mutable because at::Generator::mutex() is not const.
  mutable at::Generator cpu_;
};

const at::Generator& default_generator(c10::DeviceIndex index) {
  static const auto* generators = [] {
    auto* result = new std::vector<at::Generator>();
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      auto generator = at::make_generator<EmuGeneratorImpl>(i);
      generator.seed(); // nondeterministic until seeded, as on CUDA
      result->push_back(std::move(generator));
    }
    return result;
  }();
  if (index < 0) {
    index = current_device();
  }
  check_index(index);
  return (*generators)[static_cast<size_t>(index)];
}

const at::Generator& cpu_generator_of(const at::Generator& generator) {
  return static_cast<EmuGeneratorImpl*>(generator.unsafeGetGeneratorImpl())
      ->cpu_generator();
}

// ---------------------------------------------------------------------------
// Device guard: a current device per thread, one stream per device (the
// default one) and events that only remember when they were recorded; since
// every kernel has finished when it returns, that is all they need.

struct EmuEvent {
  std::chrono::steady_clock::time_point when;
};

struct EmuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = kEmu;

  EmuGuardImpl() = default;
  explicit EmuGuardImpl(c10::DeviceType type) {
    TORCH_INTERNAL_ASSERT(type == kEmu);
  }

  c10::DeviceType type() const override {
    return kEmu;
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kEmu);
    return {kEmu, exchange_device(device.index())};
  }
  c10::Device getDevice() const override {
    return {kEmu, current_device()};
  }
  void setDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kEmu);
    set_current_device(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < device_count()) {
      tls_current_device = device.index();
    }
  }
  c10::Stream getStream(c10::Device device) const override {
    return default_stream(device);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return default_stream(device);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high*/)
      const override {
    return default_stream(device);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/)
      const override {
    return default_stream(device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    return default_stream(stream.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/)
      const override {
    return c10::DeviceCapability();
  }
  void record(
      void** event,
      const c10::Stream& /*stream*/,
      const c10::DeviceIndex /*device_index*/,
      const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr) {
      *event = new EmuEvent();
    }
    static_cast<EmuEvent*>(*event)->when = std::chrono::steady_clock::now();
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/)
      const noexcept override {
    delete static_cast<EmuEvent*>(event);
  }
  void synchronizeEvent(void* /*event*/) const override {}
  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/)
      const override {}
  double elapsedTime(
      void* start,
      void* end,
      const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(
        start != nullptr && end != nullptr,
        "Both events must be recorded before calculating elapsed time.");
    const auto delta = static_cast<EmuEvent*>(end)->when -
        static_cast<EmuEvent*>(start)->when;
    return std::chrono::duration<double, std::milli>(delta).count();
  }

 private:
  static c10::Stream default_stream(c10::Device device) {
    if (device.index() < 0) {
      device = c10::Device(kEmu, current_device());
    }
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuardImpl);

// ---------------------------------------------------------------------------
// Hooks: what torch asks a PrivateUse1 backend outside of kernels.

struct EmuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return device_count() > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override {
    return true;
  }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_current_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }
  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    if (device_index < 0) {
      device_index = current_device();
    }
    check_index(device_index);
    return at::make_generator<EmuGeneratorImpl>(device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    const auto address = reinterpret_cast<uintptr_t>(data);
    auto& registry = block_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto it = registry.blocks.upper_bound(address);
    TORCH_CHECK(
        it != registry.blocks.begin() &&
            address < std::prev(it)->first + std::prev(it)->second.size,
        "emu: pointer ",
        data,
        " is not emulated device memory");
    return {kEmu, std::prev(it)->second.device};
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned_pointer(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return &host_allocator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize)
      const override {
    c10::DeviceGuard guard(storage.device());
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
};

const bool hooks_registered [[maybe_unused]] = [] {
  at::RegisterPrivateUse1HooksInterface(new EmuHooks());
  return true;
}();

// ---------------------------------------------------------------------------
// Native kernels: creation, views (which must alias, so they cannot go through
// the fallback), copies, resizing, and a few hot in-place fills.

// A CPU tensor over the same memory, for handing emu data to CPU kernels.
at::Tensor cpu_alias(const at::Tensor& tensor) {
  auto alias = at::from_blob(
      tensor.data_ptr(),
      tensor.sizes(),
      tensor.strides(),
      tensor.options().device(c10::kCPU));
  alias._set_conj(tensor.is_conj());
  alias._set_neg(tensor.is_neg());
  return alias;
}

// What CUDA's empty does under torch.use_deterministic_algorithms(True) with
// fill_uninitialized_memory on: NaN for floating types, the largest value for
// integral ones, so that reading uninitialized memory shows.
at::Tensor fill_if_deterministic(at::Tensor tensor) {
  const auto& context = at::globalContext();
  if (!(context.deterministicAlgorithms() &&
        context.deterministicFillUninitializedMemory()) ||
      tensor.numel() == 0) {
    return tensor;
  }
  auto alias = cpu_alias(tensor);
  switch (tensor.scalar_type()) {
    case c10::kBool:
      alias.fill_(true);
      break;
    case c10::kByte:
      alias.fill_(std::numeric_limits<uint8_t>::max());
      break;
    case c10::kChar:
      alias.fill_(std::numeric_limits<int8_t>::max());
      break;
    case c10::kShort:
      alias.fill_(std::numeric_limits<int16_t>::max());
      break;
    case c10::kInt:
      alias.fill_(std::numeric_limits<int32_t>::max());
      break;
    case c10::kLong:
      alias.fill_(std::numeric_limits<int64_t>::max());
      break;
    default:
      if (tensor.is_floating_point() || tensor.is_complex()) {
        alias.fill_(std::numeric_limits<double>::quiet_NaN());
      }
      break;
  }
  return tensor;
}

void check_strided(std::optional<c10::Layout> layout, std::optional<bool> pin) {
  TORCH_CHECK(
      c10::layout_or_default(layout) == c10::Layout::Strided,
      "emu: only strided tensors are supported");
  TORCH_CHECK(
      !c10::pinned_memory_or_default(pin),
      "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  check_strided(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return fill_if_deterministic(at::detail::empty_generic(
      size,
      &device_allocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype),
      memory_format));
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  check_strided(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return fill_if_deterministic(at::detail::empty_strided_generic(
      size,
      stride,
      &device_allocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype)));
}

at::Tensor as_strided(
    const at::Tensor& self,
    c10::SymIntArrayRef size,
    c10::SymIntArrayRef stride,
    std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) {
    offset = storage_offset->guard_int(__FILE__, __LINE__);
  }
  return at::native::as_strided_tensorimpl(
      self,
      C10_AS_INTARRAYREF_SLOW(size),
      C10_AS_INTARRAYREF_SLOW(stride),
      offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(
    const at::Tensor& self,
    c10::SymIntArrayRef size,
    c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(
    const at::Tensor& self,
    int64_t dimension,
    int64_t size,
    int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) {
  return at::native::view_as_real(self);
}

at::Tensor view_as_complex(const at::Tensor& self) {
  return at::native::view_as_complex(self);
}

at::Tensor copy_from(
    const at::Tensor& self,
    const at::Tensor& dst,
    bool /*non_blocking*/) {
  if (self.numel() == 0) {
    return dst;
  }
  auto src = self.is_cpu() ? self : cpu_alias(self);
  if (!self.is_cpu() && !dst.is_cpu() && self.is_alias_of(dst)) {
    // The CPU aliases hide that both sides share memory: check here what the
    // CPU copy would check, and read the source before it is overwritten.
    at::assert_no_partial_overlap(dst, self);
    src = src.clone();
  }
  if (dst.is_cpu()) {
    // `dst` may be a CPU tensor that requires grad; the copy is below autograd.
    const_cast<at::Tensor&>(dst).copy_(src);
  } else {
    cpu_alias(dst).copy_(src);
  }
  return dst;
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::SymIntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(
      self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return cpu_alias(self).item();
}

at::Tensor& set_storage(
    at::Tensor& self,
    c10::Storage source,
    c10::SymInt storage_offset,
    c10::SymIntArrayRef size,
    c10::SymIntArrayRef stride) {
  const c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(
      self,
      std::move(source),
      storage_offset.guard_int(__FILE__, __LINE__),
      C10_AS_INTARRAYREF_SLOW(size),
      C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(
      c10::Storage::use_byte_size_t(),
      0,
      &device_allocator(),
      /*resizable=*/true);
  const int64_t empty_size[] = {0};
  return self.set_(
      std::move(storage), 0, c10::IntArrayRef(empty_size), c10::IntArrayRef());
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() > 0) {
    cpu_alias(self).fill_(value);
  }
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(
      value.dim() == 0,
      "fill_ only supports 0-dimension value tensor but got tensor with ",
      value.dim(),
      " dimensions.");
  return fill_scalar(self, value.item());
}

at::Tensor& zero(at::Tensor& self) {
  return fill_scalar(self, 0);
}

// The CPU kernel draws its mask from the CPU default generator and has no
// generator argument to redirect, so dropout is built here from bernoulli_,
// which does go through the emu generator. The mask is boolean, as on CUDA.
std::tuple<at::Tensor, at::Tensor> native_dropout(
    const at::Tensor& input,
    double p,
    std::optional<bool> train) {
  const auto mask_options = input.options().dtype(c10::kBool);
  if (input.numel() == 0) {
    return {input, at::empty_like(input, mask_options)};
  }
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, mask_options)};
  }
  const double keep = 1.0 - p;
  const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
  auto mask = at::empty_like(input, mask_options).bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

// Convolution picks its implementation by device type, and for PrivateUse1 it
// calls these two ops, whose default kernels only raise; here they run
// torch's CPU convolution.
at::Tensor on_device(const at::Tensor& cpu_result, const c10::Device& device) {
  return cpu_result.defined() ? cpu_result.to(device) : cpu_result;
}

at::Tensor on_cpu(const at::Tensor& tensor) {
  return tensor.defined() ? tensor.cpu() : tensor;
}

at::Tensor convolution_overrideable(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding,
    c10::SymIntArrayRef dilation,
    bool transposed,
    c10::SymIntArrayRef output_padding,
    c10::SymInt groups) {
  std::optional<at::Tensor> cpu_bias;
  if (bias.has_value() && bias->defined()) {
    cpu_bias = bias->cpu();
  }
  return on_device(
      at::convolution(
          input.cpu(),
          weight.cpu(),
          cpu_bias,
          C10_AS_INTARRAYREF_SLOW(stride),
          C10_AS_INTARRAYREF_SLOW(padding),
          C10_AS_INTARRAYREF_SLOW(dilation),
          transposed,
          C10_AS_INTARRAYREF_SLOW(output_padding),
          groups.guard_int(__FILE__, __LINE__)),
      input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor>
convolution_backward_overrideable(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    const at::Tensor& weight,
    c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding,
    c10::SymIntArrayRef dilation,
    bool transposed,
    c10::SymIntArrayRef output_padding,
    c10::SymInt groups,
    std::array<bool, 3> output_mask) {
  std::optional<std::vector<int64_t>> bias_sizes;
  if (output_mask[2]) {
    bias_sizes = std::vector<int64_t>{grad_output.size(1)};
  }
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      on_cpu(grad_output),
      on_cpu(input),
      on_cpu(weight),
      bias_sizes.has_value() ? at::OptionalIntArrayRef(*bias_sizes)
                             : at::OptionalIntArrayRef(),
      C10_AS_INTARRAYREF_SLOW(stride),
      C10_AS_INTARRAYREF_SLOW(padding),
      C10_AS_INTARRAYREF_SLOW(dilation),
      transposed,
      C10_AS_INTARRAYREF_SLOW(output_padding),
      groups.guard_int(__FILE__, __LINE__),
      output_mask);
  const auto device = grad_output.device();
  return {
      on_device(grad_input, device),
      on_device(grad_weight, device),
      on_device(grad_bias, device)};
}

// LSTM and GRU cells take their fused path on any device but the CPU, and the
// fused kernels exist only for CUDA. These compute the same results, and the
// same workspaces for the backward, from ordinary ops.
at::Tensor add_biases(
    at::Tensor gates,
    const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  const auto gates = add_biases(
      add_biases(input_gates + hidden_gates, input_bias), hidden_bias);
  const auto chunks = gates.chunk(4, 1);
  const auto in = chunks[0].sigmoid();
  const auto forget = chunks[1].sigmoid();
  const auto cell = chunks[2].tanh();
  const auto out = chunks[3].sigmoid();
  auto cy = forget * cx + in * cell;
  auto hy = out * cy.tanh();
  return {hy, cy, at::cat(at::TensorList({in, forget, cell, out}), 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx,
    const at::Tensor& cy,
    const at::Tensor& workspace,
    bool has_bias) {
  const auto chunks = workspace.chunk(4, 1);
  const auto& in = chunks[0];
  const auto& forget = chunks[1];
  const auto& cell = chunks[2];
  const auto& out = chunks[3];
  const auto tanh_cy = cy.tanh();
  const bool has_grad_hy = grad_hy.has_value() && grad_hy->defined();
  const bool has_grad_cy = grad_cy.has_value() && grad_cy->defined();
  const auto zeros = at::zeros_like(cy);
  const auto ghy = has_grad_hy ? *grad_hy : zeros;
  auto gcy = ghy * out * (1 - tanh_cy * tanh_cy);
  if (has_grad_cy) {
    gcy = gcy + *grad_cy;
  }
  auto grad_gates = at::cat(
      at::TensorList(
          {gcy * cell * in * (1 - in),
           gcy * cx * forget * (1 - forget),
           gcy * in * (1 - cell * cell),
           ghy * tanh_cy * out * (1 - out)}),
      1);
  auto grad_cx = gcy * forget;
  auto grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  const auto in_chunks = add_biases(input_gates, input_bias).chunk(3, 1);
  const auto hidden_chunks = add_biases(hidden_gates, hidden_bias).chunk(3, 1);
  const auto reset = (in_chunks[0] + hidden_chunks[0]).sigmoid();
  const auto update = (in_chunks[1] + hidden_chunks[1]).sigmoid();
  const auto& hidden_new = hidden_chunks[2];
  const auto new_gate = (in_chunks[2] + reset * hidden_new).tanh();
  auto hy = new_gate + update * (hx - new_gate);
  auto workspace =
      at::cat(at::TensorList({reset, update, new_gate, hx, hidden_new}), 1);
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
fused_gru_cell_backward(
    const at::Tensor& grad_hy,
    const at::Tensor& workspace,
    bool has_bias) {
  const auto chunks = workspace.chunk(5, 1);
  const auto& reset = chunks[0];
  const auto& update = chunks[1];
  const auto& new_gate = chunks[2];
  const auto& hx = chunks[3];
  const auto& hidden_new = chunks[4];
  const auto grad_new = grad_hy * (1 - update) * (1 - new_gate * new_gate);
  const auto grad_update = grad_hy * (hx - new_gate) * update * (1 - update);
  const auto grad_reset = grad_new * hidden_new * reset * (1 - reset);
  auto grad_input_gates =
      at::cat(at::TensorList({grad_reset, grad_update, grad_new}), 1);
  auto grad_hidden_gates =
      at::cat(at::TensorList({grad_reset, grad_update, grad_new * reset}), 1);
  auto grad_hx = grad_hy * update;
  at::Tensor grad_input_bias;
  at::Tensor grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input_gates.sum(0);
    grad_hidden_bias = grad_hidden_gates.sum(0);
  }
  return {
      grad_input_gates,
      grad_hidden_gates,
      grad_hx,
      grad_input_bias,
      grad_hidden_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("unfold", unfold);
  m.impl("view_as_real", view_as_real);
  m.impl("view_as_complex", view_as_complex);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize_);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero);
  m.impl("native_dropout", native_dropout);
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl(
      "convolution_backward_overrideable", convolution_backward_overrideable);
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

// ---------------------------------------------------------------------------
// Everything else runs on the CPU through torch's CPU fallback, with what the
// fallback does not do itself: tensors on two emu devices are refused, as CUDA
// refuses them; generators (explicit emu ones, and the defaults behind `None`)
// become the emu device's CPU generator; and results follow the emu tensors
// even when a CPU scalar tensor comes first.

bool is_generator_argument(const c10::Argument& argument) {
  const auto& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) {
    return true;
  }
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const auto count = arguments.size();
  const auto begin = stack->size() - count;

  std::optional<c10::Device> emu_device; // of the first emu tensor
  std::optional<c10::Device> device_argument;
  bool first_tensor_on_cpu = false;
  bool seen_tensor = false;
  for (size_t i = 0; i < count; ++i) {
    const auto& value = (*stack)[begin + i];
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      if (!tensor.defined()) {
        continue;
      }
      if (!seen_tensor) {
        seen_tensor = true;
        first_tensor_on_cpu = tensor.is_cpu();
      }
      if (tensor.device().type() != kEmu) {
        continue;
      }
      if (!emu_device) {
        emu_device = tensor.device();
      } else {
        TORCH_CHECK(
            *emu_device == tensor.device(),
            "Expected all tensors to be on the same device, but found at "
            "least two devices, ",
            *emu_device,
            " and ",
            tensor.device(),
            "!");
      }
    } else if (value.isTensorList() && !emu_device) {
      for (const at::Tensor& tensor : value.toTensorList()) {
        if (tensor.defined() && tensor.device().type() == kEmu) {
          emu_device = tensor.device();
          break;
        }
      }
    } else if (value.isDevice() && !device_argument) {
      device_argument = value.toDevice();
    }
  }

  c10::DeviceIndex index = current_device();
  if (emu_device) {
    index = emu_device->index();
  } else if (
      device_argument && device_argument->type() == kEmu &&
      device_argument->index() >= 0) {
    index = device_argument->index();
  }

  // A generator must be of the device the op runs on, as CUDA insists; only
  // then is it swapped for the CPU generator behind it.
  const bool on_emu = emu_device.has_value() ||
      (device_argument.has_value() && device_argument->type() == kEmu);
  for (size_t i = 0; i < count; ++i) {
    if (!is_generator_argument(arguments[i])) {
      continue;
    }
    auto& value = (*stack)[begin + i];
    if (value.isNone()) {
      if (on_emu) {
        value = c10::IValue(cpu_generator_of(default_generator(index)));
      }
    } else if (value.isGenerator()) {
      const auto generator = value.toGenerator();
      const auto expected = on_emu ? kEmu : c10::kCPU;
      TORCH_CHECK(
          generator.device().type() == expected,
          "Expected a '",
          c10::DeviceTypeName(expected, /*lower_case=*/true),
          "' device type for generator but found '",
          c10::DeviceTypeName(generator.device().type(), /*lower_case=*/true),
          "'");
      if (on_emu) {
        value = c10::IValue(cpu_generator_of(generator));
      }
    }
  }

  const c10::DeviceGuard guard(c10::Device(kEmu, index));
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);

  if (!(first_tensor_on_cpu && emu_device && !device_argument)) {
    return;
  }
  const auto& returns = op.schema().returns();
  const auto returns_begin = stack->size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    if (returns[i].alias_info() != nullptr) {
      continue; // in-place results are the caller's tensors already
    }
    auto& value = (*stack)[returns_begin + i];
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      if (tensor.defined() && tensor.is_cpu()) {
        value = c10::IValue(tensor.to(*emu_device));
      }
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        const at::Tensor tensor = list.get(j);
        if (tensor.defined() && tensor.is_cpu()) {
          list.set(j, tensor.to(*emu_device));
        }
      }
    }
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

// ---------------------------------------------------------------------------
// Autocast: CUDA's casting policies for the ops that matter most, as boxed
// kernels. Tensors on the device with a floating dtype other than float64 are
// cast; everything else passes through unchanged.

bool autocast_eligible(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kEmu &&
      tensor.is_floating_point() && tensor.scalar_type() != c10::kDouble;
}

template <typename F>
void for_each_tensor_argument(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    F f) {
  const auto count = op.schema().arguments().size();
  const auto begin = stack->size() - count;
  for (size_t i = 0; i < count; ++i) {
    auto& value = (*stack)[begin + i];
    if (value.isTensor()) {
      f(value.toTensor(), [&](at::Tensor t) { value = c10::IValue(t); });
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        f(list.get(j), [&](at::Tensor t) { list.set(j, std::move(t)); });
      }
    }
  }
}

void autocast_to(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    c10::ScalarType dtype) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(
      c10::DispatchKey::AutocastPrivateUse1);
  for_each_tensor_argument(op, stack, [&](const at::Tensor& t, auto replace) {
    if (autocast_eligible(t) && t.scalar_type() != dtype) {
      replace(t.to(dtype));
    }
  });
  op.callBoxed(stack);
}

void autocast_lower_precision(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack) {
  autocast_to(op, stack, at::autocast::get_autocast_dtype(kEmu));
}

void autocast_fp32(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  autocast_to(op, stack, c10::kFloat);
}

void autocast_fp32_set_opt_dtype(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(
      c10::DispatchKey::AutocastPrivateUse1);
  const auto& arguments = op.schema().arguments();
  const auto begin = stack->size() - arguments.size();
  const auto& first = (*stack)[begin];
  if (first.isTensor() && autocast_eligible(first.toTensor())) {
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (arguments[i].name() == "dtype" && (*stack)[begin + i].isNone()) {
        (*stack)[begin + i] = c10::IValue(c10::kFloat);
      }
    }
  }
  op.callBoxed(stack);
}

void autocast_promote(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto dtype = at::autocast::get_autocast_dtype(kEmu);
  for_each_tensor_argument(op, stack, [&](const at::Tensor& t, auto) {
    if (autocast_eligible(t)) {
      dtype = c10::promoteTypes(dtype, t.scalar_type());
    }
  });
  autocast_to(op, stack, dtype);
}

constexpr const char* kLowerPrecisionOps[] = {
    "_convolution", "conv1d", "conv1d.padding", "conv2d", "conv2d.padding",
    "conv3d", "conv3d.padding", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linear", "addbmm", "baddbmm", "bmm",
    "chain_matmul", "linalg_multi_dot", "scaled_dot_product_attention",
};

constexpr const char* kFp32Ops[] = {
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2",
    "log1p", "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar",
    "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm",
    "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss",
    "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp",
};

// Reductions and softmaxes with an optional dtype: CUDA has them compute in
// float32 by filling in dtype when it is not given.
constexpr const char* kFp32SetOptDtypeOps[] = {
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod",
    "cumsum", "linalg_vector_norm", "linalg_matrix_norm",
    "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList",
};

constexpr const char* kPromoteOps[] = {
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot",
    "grid_sampler", "index_put", "tensordot", "scatter_add", "cat", "stack",
};

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  for (const char* name : kLowerPrecisionOps) {
    m.impl(
        name,
        torch::CppFunction::makeFromBoxedFunction<&autocast_lower_precision>());
  }
  for (const char* name : kFp32Ops) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autocast_fp32>());
  }
  for (const char* name : kFp32SetOptDtypeOps) {
    m.impl(
        name,
        torch::CppFunction::makeFromBoxedFunction<
            &autocast_fp32_set_opt_dtype>());
  }
  for (const char* name : kPromoteOps) {
    m.impl(
        name, torch::CppFunction::makeFromBoxedFunction<&autocast_promote>());
  }
}

// ---------------------------------------------------------------------------
// The Python module: what device.py needs beyond torch.accelerator. Errors
// become Python exceptions here, since no C++ exception may cross into Python.

template <typename F>
PyObject* guarded(F f) {
  try {
    return f();
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// -1 stands for the current device, as in c10.
bool parse_index(PyObject* arg, c10::DeviceIndex* index) {
  const long value = PyLong_AsLong(arg);
  if (value == -1 && PyErr_Occurred()) {
    return false;
  }
  if (value < -1 || value >= device_count()) {
    PyErr_Format(
        PyExc_ValueError,
        "emu: invalid device index %ld (this process has %d emulated devices)",
        value,
        static_cast<int>(device_count()));
    return false;
  }
  *index = static_cast<c10::DeviceIndex>(value < 0 ? current_device() : value);
  return true;
}

PyObject* py_device_count(PyObject*, PyObject*) {
  return PyLong_FromLong(device_count());
}

PyObject* py_current_device(PyObject*, PyObject*) {
  return PyLong_FromLong(current_device());
}

PyObject* py_set_device(PyObject*, PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) {
    return nullptr;
  }
  set_current_device(index);
  Py_RETURN_NONE;
}

PyObject* py_total_memory(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(total_memory());
}

PyObject* py_get_memory_fraction(PyObject*, PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) {
    return nullptr;
  }
  return guarded([&]() -> PyObject* {
    return PyFloat_FromDouble(EmuAllocator::get_fraction(index));
  });
}

PyObject* py_set_memory_fraction(PyObject*, PyObject* args) {
  double fraction = 0.0;
  PyObject* device = nullptr;
  c10::DeviceIndex index = 0;
  if (!PyArg_ParseTuple(args, "dO", &fraction, &device) ||
      !parse_index(device, &index)) {
    return nullptr;
  }
  return guarded([&]() -> PyObject* {
    EmuAllocator::set_fraction(index, fraction);
    Py_RETURN_NONE;
  });
}

PyObject* py_default_generator(PyObject*, PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) {
    return nullptr;
  }
  return guarded([&]() -> PyObject* {
    return THPGenerator_initDefaultGenerator(default_generator(index));
  });
}

PyMethodDef methods[] = {
    {"device_count", py_device_count, METH_NOARGS,
     "Number of emulated devices."},
    {"current_device", py_current_device, METH_NOARGS,
     "This thread's current emulated device."},
    {"set_device", py_set_device, METH_O, "Set this thread's current device."},
    {"total_memory", py_total_memory, METH_NOARGS,
     "Emulated memory of each device, in bytes."},
    {"get_memory_fraction", py_get_memory_fraction, METH_O,
     "The per-process memory fraction of a device."},
    {"set_memory_fraction", py_set_memory_fraction, METH_VARARGS,
     "Set the per-process memory fraction of a device: (fraction, device)."},
    {"default_generator", py_default_generator, METH_O,
     "The default torch.Generator of a device (a new Python wrapper)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "Native part of the test suite's emulated accelerator.",
    -1,
    methods,
};

} // namespace

PyMODINIT_FUNC PyInit__C() {
  return PyModule_Create(&module_def);
}
