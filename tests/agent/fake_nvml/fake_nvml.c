/*
 * A stand-in for the driver's libnvidia-ml.so.1, so that the agent's real NVML backend
 * (crates/agent/src/nvml/real) runs, call by call, on a machine without a GPU. It is built by
 * the tests (tests/agent/nvml_fake_driver.rs) and loaded through RealNvml::init_with_library.
 *
 * It models one H100 80GB in MIG mode with two 1g.10gb GPU instances, each one full-size
 * compute instance, and the answers NVML gives on real drivers where they differ from the
 * happy path. The signatures, struct layouts and return codes are those of nvml.h as
 * NVIDIA/go-nvml `pkg/nvml/nvml.h` publishes it; only the calls the agent and nvml-wrapper make
 * are defined (nvml-wrapper looks every symbol up lazily).
 *
 * Behaviour is set per library file: at nvmlInit_v2 it reads "<this library's path>.conf",
 * lines of "key value" (see `struct config`), and at nvmlShutdown it writes how often each
 * call was made to "<path>.calls". Tests copy the library once per test, so each has its own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
  unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
  unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
      copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
  char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
  unsigned start, size;
} nvmlGpuInstancePlacement_t;
typedef struct {
  unsigned id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

/* Handles point into these tables. */
struct mig_device {
  int used;
  unsigned gi, ci;
  char uuid[48];
};
struct compute_instance {
  int used;
  unsigned id, profile_id, slices;
};
struct gpu_instance {
  int used;
  unsigned id, profile_id, start, size, slices;
  struct compute_instance cis[8];
};
typedef void *nvmlDevice_t;
typedef struct gpu_instance *nvmlGpuInstance_t;
typedef struct compute_instance *nvmlComputeInstance_t;
typedef struct {
  nvmlDevice_t device;
  unsigned id, profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned id, profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

#define MAX_MIG 7
static int gpu;                      /* the GPU's handle is &gpu */
static struct mig_device migs[MAX_MIG]; /* MIG device handles are &migs[i] */
static struct gpu_instance gis[MAX_MIG];
static int mig_enabled = 1, mig_pending = 1;
static unsigned processes_now;

/* What a test sets in "<library>.conf". */
static struct config {
  /* Returned by the versioned profile-info call (0: it answers). */
  int versioned_profile_info;
  /* Returned for MIG device slots that hold no device but sit between ones that do. */
  int empty_slot;
  /* Compute processes on MIG device 0, and on the GPU as a whole. */
  int mig_processes, gpu_processes;
  /* Reads of a process list on which it grows past the room the caller gave. */
  int process_growth;
  /* Returned by nvmlGpuInstanceDestroy (0: it destroys, or IN_USE with compute instances). */
  int destroy_gpu_instance;
  /* The activation status nvmlDeviceSetMigMode reports, while itself returning success. */
  int activation;
} config = {0, NVML_ERROR_INVALID_ARGUMENT, 0, 0, 0, 0, 0};

static struct {
  const char *name;
  int *value;
} config_keys[] = {
    {"versioned_profile_info", &config.versioned_profile_info},
    {"empty_slot", &config.empty_slot},
    {"mig_processes", &config.mig_processes},
    {"gpu_processes", &config.gpu_processes},
    {"process_growth", &config.process_growth},
    {"destroy_gpu_instance", &config.destroy_gpu_instance},
    {"activation", &config.activation},
};

/* Calls counted for "<library>.calls". */
static const char *call_names[] = {"nvmlDeviceGetMigDeviceHandleByIndex",
                                   "nvmlDeviceGetComputeRunningProcesses_v3",
                                   "nvmlDeviceGetGpuInstanceProfileInfo",
                                   "nvmlDeviceGetGpuInstanceProfileInfoV"};
enum { CALL_MIG_HANDLE, CALL_PROCESSES, CALL_PROFILE_INFO, CALL_PROFILE_INFO_V, CALLS };
static unsigned calls[CALLS];

static void own_path(char *out, size_t len, const char *suffix) {
  Dl_info info;
  out[0] = 0;
  if (dladdr((void *)&own_path, &info) && info.dli_fname)
    snprintf(out, len, "%s%s", info.dli_fname, suffix);
}

static void read_config(void) {
  char path[4096], key[64];
  int value;
  own_path(path, sizeof path, ".conf");
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  while (fscanf(f, "%63s %d", key, &value) == 2)
    for (size_t i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++)
      if (!strcmp(key, config_keys[i].name))
        *config_keys[i].value = value;
  fclose(f);
}

static void write_calls(void) {
  char path[4096];
  own_path(path, sizeof path, ".calls");
  FILE *f = fopen(path, "w");
  if (!f)
    return;
  for (int i = 0; i < CALLS; i++)
    fprintf(f, "%s %u\n", call_names[i], calls[i]);
  fclose(f);
}

/* GPU-instance profiles of an H100 80GB at their NVML profile indexes (nvml.h
 * NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0 and _7_SLICE = 4); the other indexes are absent. */
struct profile {
  unsigned index, id, slices, count, memory_mib;
  const char *name;
};
static const struct profile profiles[] = {
    {0, 19, 1, 7, 9856, "MIG 1g.10gb"},
    {4, 0, 7, 1, 80896, "MIG 7g.80gb"},
};
#define PROFILES (sizeof profiles / sizeof profiles[0])

static const struct profile *profile_by_id(unsigned id) {
  for (size_t i = 0; i < PROFILES; i++)
    if (profiles[i].id == id)
      return &profiles[i];
  return NULL;
}

static void add_mig_device(unsigned gi, unsigned ci) {
  for (int i = 0; i < MAX_MIG; i++)
    if (!migs[i].used) {
      migs[i] = (struct mig_device){1, gi, ci, ""};
      snprintf(migs[i].uuid, sizeof migs[i].uuid, "MIG-fake-%u-%u", gi, ci);
      return;
    }
}

static void add_gpu_instance(unsigned id, unsigned profile_id, unsigned start) {
  const struct profile *p = profile_by_id(profile_id);
  struct gpu_instance *gi = &gis[id - 1];
  *gi = (struct gpu_instance){1, id, profile_id, start, p->slices == 7 ? 8 : 1, p->slices, {{0}}};
}

static void add_compute_instance(struct gpu_instance *gi, unsigned id, unsigned profile_id, unsigned slices) {
  gi->cis[id] = (struct compute_instance){1, id, profile_id, slices};
  add_mig_device(gi->id, id);
}

nvmlReturn_t nvmlInit_v2(void) {
  read_config();
  memset(migs, 0, sizeof migs);
  memset(gis, 0, sizeof gis);
  add_gpu_instance(1, 19, 0);
  add_gpu_instance(2, 19, 1);
  add_compute_instance(&gis[0], 0, 0, 1);
  /* The second MIG device sits one slot further on, past a slot NVML answers for oddly. */
  migs[1].used = -1;
  add_compute_instance(&gis[1], 0, 0, 1);
  migs[1].used = 0;
  processes_now = config.mig_processes;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  write_calls();
  return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t code) {
  switch (code) {
  case NVML_ERROR_OPERATING_SYSTEM:
    return "fake NVML: the operating system refused";
  case NVML_ERROR_IN_USE:
    return "fake NVML: in use";
  default:
    return "fake NVML: unknown error";
  }
}

static nvmlReturn_t copy_string(char *buf, unsigned len, const char *value) {
  if (strlen(value) + 1 > len)
    return NVML_ERROR_INSUFFICIENT_SIZE;
  strcpy(buf, value);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len) { return copy_string(buf, len, "570.0-fake"); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
  *count = 1;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *dev) {
  if (index != 0)
    return NVML_ERROR_INVALID_ARGUMENT;
  *dev = &gpu;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *buf, unsigned len) {
  return copy_string(buf, len, dev == &gpu ? "NVIDIA H100 80GB HBM3" : "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *buf, unsigned len) {
  if (dev == &gpu)
    return copy_string(buf, len, "GPU-fake-0");
  return copy_string(buf, len, ((struct mig_device *)dev)->uuid);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci) {
  (void)dev;
  memset(pci, 0, sizeof *pci);
  pci->pciDeviceId = 0x233010DE;
  strcpy(pci->busId, "00000000:01:00.0");
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *memory) {
  (void)dev;
  if (memory->version != (sizeof *memory | 2u << 24))
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  memory->total = 81559ull << 20;
  memory->free = memory->total;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned *current, unsigned *pending) {
  (void)dev;
  *current = mig_enabled;
  *pending = mig_pending;
  return NVML_SUCCESS;
}

/* Success, with the real outcome in the activation status (nvml.h, nvmlDeviceSetMigMode). */
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t dev, unsigned mode, nvmlReturn_t *activation) {
  (void)dev;
  mig_pending = mode;
  *activation = config.activation;
  if (config.activation == NVML_SUCCESS)
    mig_enabled = mode;
  return NVML_SUCCESS;
}

static void fill_profile(const struct profile *p, nvmlGpuInstanceProfileInfo_t *info) {
  memset(info, 0, sizeof *info);
  info->id = p->id;
  info->sliceCount = p->slices;
  info->instanceCount = p->count;
  info->multiprocessorCount = 16 * p->slices;
  info->memorySizeMB = p->memory_mib;
}

static const struct profile *profile_at(unsigned index) {
  for (size_t i = 0; i < PROFILES; i++)
    if (profiles[i].index == index)
      return &profiles[i];
  return NULL;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t dev, unsigned index,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
  (void)dev;
  calls[CALL_PROFILE_INFO]++;
  const struct profile *p = profile_at(index);
  if (!p)
    return NVML_ERROR_NOT_SUPPORTED;
  fill_profile(p, info);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t dev, unsigned index,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
  (void)dev;
  calls[CALL_PROFILE_INFO_V]++;
  if (config.versioned_profile_info)
    return config.versioned_profile_info;
  if (info->version != (sizeof *info | 2u << 24))
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  const struct profile *p = profile_at(index);
  if (!p)
    return NVML_ERROR_NOT_SUPPORTED;
  nvmlGpuInstanceProfileInfo_t plain;
  fill_profile(p, &plain);
  unsigned version = info->version;
  memcpy(&info->id, &plain, offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB));
  info->version = version;
  info->memorySizeMB = plain.memorySizeMB;
  strcpy(info->name, p->name);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t dev, unsigned profile_id,
                                                            nvmlGpuInstancePlacement_t *out,
                                                            unsigned *count) {
  (void)dev;
  const struct profile *p = profile_by_id(profile_id);
  if (!p)
    return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = p->slices == 7 ? 1 : 7;
  if (!out) {
    *count = n;
    return NVML_SUCCESS;
  }
  if (*count < n)
    return NVML_ERROR_INSUFFICIENT_SIZE;
  for (unsigned i = 0; i < n; i++)
    out[i] = p->slices == 7 ? (nvmlGpuInstancePlacement_t){0, 8} : (nvmlGpuInstancePlacement_t){i, 1};
  *count = n;
  return NVML_SUCCESS;
}

static void gi_info(struct gpu_instance *gi, nvmlGpuInstanceInfo_t *info) {
  info->device = &gpu;
  info->id = gi->id;
  info->profileId = gi->profile_id;
  info->placement = (nvmlGpuInstancePlacement_t){gi->start, gi->size};
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t dev, unsigned profile_id, nvmlGpuInstance_t *out,
                                       unsigned *count) {
  (void)dev;
  const struct profile *p = profile_by_id(profile_id);
  if (!p)
    return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (int i = 0; i < MAX_MIG; i++)
    if (gis[i].used && gis[i].profile_id == profile_id)
      out[n++] = &gis[i];
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t dev, unsigned id, nvmlGpuInstance_t *out) {
  (void)dev;
  if (id < 1 || id > MAX_MIG || !gis[id - 1].used)
    return NVML_ERROR_NOT_FOUND;
  *out = &gis[id - 1];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info) {
  gi_info(gi, info);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t dev, unsigned profile_id,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *out) {
  (void)dev;
  const struct profile *p = profile_by_id(profile_id);
  if (!p)
    return NVML_ERROR_INVALID_ARGUMENT;
  unsigned size = p->slices == 7 ? 8 : 1;
  if (placement->size != size || placement->start + size > 8)
    return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < MAX_MIG; i++)
    if (gis[i].used && placement->start < gis[i].start + gis[i].size && gis[i].start < placement->start + size)
      return NVML_ERROR_INSUFFICIENT_RESOURCES;
  for (unsigned id = 1; id <= MAX_MIG; id++)
    if (!gis[id - 1].used) {
      add_gpu_instance(id, profile_id, placement->start);
      *out = &gis[id - 1];
      return NVML_SUCCESS;
    }
  return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

static int has_compute_instances(struct gpu_instance *gi) {
  for (int i = 0; i < 8; i++)
    if (gi->cis[i].used)
      return 1;
  return 0;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi) {
  if (config.destroy_gpu_instance)
    return config.destroy_gpu_instance;
  if (has_compute_instances(gi))
    return NVML_ERROR_IN_USE;
  gi->used = 0;
  return NVML_SUCCESS;
}

/* Compute-instance profile indexes (nvml.h NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0 ... _7_SLICE
 * = 4) and their slice counts; an index is offered where it fits in the GPU instance. */
static const unsigned ci_slices[] = {1, 2, 3, 4, 7};

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned index,
                                                          unsigned engine, nvmlComputeInstanceProfileInfo_t *info) {
  (void)engine;
  if (index >= sizeof ci_slices / sizeof ci_slices[0] || ci_slices[index] > gi->slices)
    return NVML_ERROR_NOT_SUPPORTED;
  memset(info, 0, sizeof *info);
  info->id = index;
  info->sliceCount = ci_slices[index];
  info->instanceCount = gi->slices / ci_slices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned profile_id,
                                                nvmlComputeInstance_t *out, unsigned *count) {
  unsigned n = 0;
  for (int i = 0; i < 8; i++)
    if (gi->cis[i].used && gi->cis[i].profile_id == profile_id)
      out[n++] = &gi->cis[i];
  *count = n;
  return NVML_SUCCESS;
}

static struct gpu_instance *owner(nvmlComputeInstance_t ci) {
  for (int i = 0; i < MAX_MIG; i++)
    if (ci >= gis[i].cis && ci < gis[i].cis + 8)
      return &gis[i];
  return NULL;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info) {
  struct gpu_instance *gi = owner(ci);
  memset(info, 0, sizeof *info);
  info->device = &gpu;
  info->gpuInstance = gi;
  info->id = ci->id;
  info->profileId = ci->profile_id;
  info->placement = (nvmlGpuInstancePlacement_t){0, ci->slices};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned profile_id,
                                                  nvmlComputeInstance_t *out) {
  if (profile_id >= sizeof ci_slices / sizeof ci_slices[0] || ci_slices[profile_id] > gi->slices)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (has_compute_instances(gi))
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  add_compute_instance(gi, 0, profile_id, ci_slices[profile_id]);
  *out = &gi->cis[0];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned id, nvmlComputeInstance_t *out) {
  if (id >= 8 || !gi->cis[id].used)
    return NVML_ERROR_NOT_FOUND;
  *out = &gi->cis[id];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
  struct gpu_instance *gi = owner(ci);
  for (int i = 0; i < MAX_MIG; i++)
    if (migs[i].used && migs[i].gi == gi->id && migs[i].ci == ci->id)
      migs[i].used = 0;
  ci->used = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned *count) {
  (void)dev;
  *count = MAX_MIG;
  return NVML_SUCCESS;
}

/* A slot without a MIG device answers NOT_FOUND, except the one at index 1, between the two
 * devices, which answers `empty_slot` (INVALID_ARGUMENT on some drivers). */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned index, nvmlDevice_t *out) {
  (void)dev;
  calls[CALL_MIG_HANDLE]++;
  if (index >= MAX_MIG)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (!migs[index].used)
    return index == 1 ? config.empty_slot : NVML_ERROR_NOT_FOUND;
  *out = &migs[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned *id) {
  *id = ((struct mig_device *)dev)->gi;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t dev, unsigned *id) {
  *id = ((struct mig_device *)dev)->ci;
  return NVML_SUCCESS;
}

/* The list for MIG device 0 (or the GPU) has `processes_now` entries; while `process_growth`
 * lasts, each read finds it grown past the room given (processes start between the count and
 * the read), and NVML answers INSUFFICIENT_SIZE with the new count. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_t *out) {
  calls[CALL_PROCESSES]++;
  unsigned n = 0;
  if (dev == &gpu)
    n = config.gpu_processes;
  else if (dev == &migs[0]) {
    if (config.process_growth > 0) {
      config.process_growth--;
      processes_now = 3 * *count + 1;
    }
    n = processes_now;
  }
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; i++)
    out[i] = (nvmlProcessInfo_t){1000 + i, 1ull << 20, 0, 0};
  *count = n;
  return NVML_SUCCESS;
}
