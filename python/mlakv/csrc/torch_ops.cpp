// Compiled kernels of torch.ops.mlakv.write / sparse_decode / sparse_decode_out (CPU and CUDA):
// the same calls as the Python kernels in torch_ops.py, without the Python work per call.
//
// Why: a Python kernel costs 15-35 us of host time per call (the dispatcher's trip into Python,
// the argument checks, two tensor allocations), measured by bench/python_overhead.py; an
// engine's eager prefill or a step outside a CUDA graph pays that per layer.
//
// How it stays identical to the Python kernels: this file handles the case where every check
// the Python kernel makes passes (the same checks, in C++) and the C call succeeds; anything
// else - a bad argument, a C status other than MLAKV_OK (the C functions write nothing when they
// fail) - goes to the Python kernel, which raises the same exception with the same message as
// without this file. The C functions come from the library the Python package loaded (their
// addresses are passed in by init), so both paths call one library instance.
//
// Built on first use by mlakv.torch_ops.use_compiled_ops() (torch.utils.cpp_extension), against
// the torch it runs with; MLAKV_TORCH_CUDA adds the CUDA kernels.
#include <torch/extension.h>
#include <torch/library.h>

#ifdef MLAKV_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "mlakv.h"

namespace {

namespace py = pybind11;
using at::Tensor;
using OptTensor = std::optional<Tensor>;

// The library's functions, by address (init).
struct Api {
    decltype(&mlakv_cache_init) cache_init = nullptr;
    decltype(&mlakv_cache_set_latent_scale) cache_set_latent_scale = nullptr;
    decltype(&mlakv_format_get) format_get = nullptr;
    decltype(&mlakv_write_options_default) write_options_default = nullptr;
    decltype(&mlakv_decode_args_default) decode_args_default = nullptr;
    decltype(&mlakv_write) write = nullptr;
    decltype(&mlakv_sparse_decode) sparse_decode = nullptr;
    decltype(&mlakv_cuda_write) cuda_write = nullptr;
    decltype(&mlakv_cuda_sparse_decode) cuda_sparse_decode = nullptr;
    decltype(&mlakv_cuda_decode_workspace_size) cuda_decode_workspace_size = nullptr;
};
Api g_api;

// The Python kernels (device-dispatching wrappers), called for everything not handled here.
// Never destroyed: they may outlive the interpreter's teardown of this module.
py::object *g_py_write = nullptr, *g_py_decode = nullptr, *g_py_decode_out = nullptr;

constexpr int64_t kLatent = 512, kRope = 64, kQk = 576, kV = 512;

bool format_of(c10::string_view name, mlakv_format *fmt, int64_t *rec) {
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        const mlakv_format_info *info = g_api.format_get((mlakv_format)f);
        if (info != nullptr && name.size() == std::strlen(info->name) &&
            std::memcmp(name.data(), info->name, name.size()) == 0) {
            *fmt = (mlakv_format)f;
            *rec = (int64_t)info->record_bytes;
            return true;
        }
    }
    return false;
}

// torch_ops._make_desc: [num_blocks, block_size, rec] (or FlashMLA's [.., .., 1, rec]) of a
// 1-byte dtype, records contiguous within a block.
bool cache_of(const Tensor &kv, c10::string_view format, double latent_scale, mlakv_cache *c) {
    mlakv_format fmt;
    int64_t rec;
    if (!format_of(format, &fmt, &rec) || kv.element_size() != 1) return false;
    int64_t shape[4], stride[4];
    int nd = (int)kv.dim();
    if (nd != 3 && !(nd == 4 && kv.size(2) == 1)) return false;
    for (int i = 0, j = 0; i < nd; i++) {
        if (nd == 4 && i == 2) continue;
        shape[j] = kv.size(i);
        stride[j++] = kv.stride(i);
    }
    if (shape[2] != rec) return false;
    const int64_t nb = shape[0], bs = shape[1];
    if ((stride[2] != 1 && rec > 1) || (stride[1] != rec && bs > 1)) return false;
    const int64_t block_stride = nb > 1 ? stride[0] : bs * rec;
    if (g_api.cache_init(c, kv.data_ptr(), fmt, nb, bs, block_stride) != MLAKV_OK) return false;
    if (latent_scale != 1.0 && g_api.cache_set_latent_scale(c, (float)latent_scale) != MLAKV_OK)
        return false;
    return true;
}

bool dtype_code(c10::ScalarType t, mlakv_dtype *code) {
    switch (t) {
    case c10::ScalarType::Float: *code = MLAKV_F32; return true;
    case c10::ScalarType::BFloat16: *code = MLAKV_BF16; return true;
    case c10::ScalarType::Half: *code = MLAKV_F16; return true;
    default: return false;
    }
}

bool no_negative_strides(const Tensor &t) {
    for (int64_t s : t.strides())
        if (s < 0) return false;
    return true;
}

// torch_ops._unit_strides: size-1 dimensions get their contiguous stride.
void unit_strides(const Tensor &t, int64_t *out) {
    const int64_t nd = t.dim();
    for (int64_t i = nd - 1; i >= 0; i--) {
        out[i] = t.stride(i);
        if (t.size(i) == 1) out[i] = i == nd - 1 ? 1 : out[i + 1] * t.size(i + 1);
    }
}

// An optional contiguous 1-D [n] tensor of `type` on `dev` (torch_ops._vector_ptr).
bool vector_ok(const OptTensor &t, c10::ScalarType type, int64_t n, const c10::Device &dev) {
    if (!t.has_value()) return true;
    const Tensor &v = *t;
    return v.scalar_type() == type && v.dim() == 1 && v.size(0) == n && v.device() == dev &&
           (n <= 1 || v.stride(0) == 1);
}

const void *ptr_or_null(const OptTensor &t) { return t.has_value() ? t->data_ptr() : nullptr; }

void *stream_of(const c10::Device &dev) {
#ifdef MLAKV_TORCH_CUDA
    return c10::cuda::getCurrentCUDAStream(dev.index()).stream();
#else
    (void)dev;
    return nullptr;
#endif
}

// ---- write ----------------------------------------------------------------------------------

// The fast path of _write_cpu / _write_cuda; false: the Python kernel takes the call.
bool write_fast(bool cuda, const Tensor &kv_cache, const Tensor &kv_c, const Tensor &k_pe,
                const Tensor &slots, c10::string_view format, int64_t recipe, double latent_scale,
                int64_t encoder) {
    const c10::Device dev = kv_cache.device();
    if (kv_c.device() != dev || k_pe.device() != dev || slots.device() != dev) return false;
    if (slots.scalar_type() != c10::ScalarType::Long || slots.dim() != 1) return false;
    const int64_t n = slots.size(0);
    if (n > 1 && slots.stride(0) != 1) return false;
    if (kv_c.dim() != 2 || kv_c.size(1) != kLatent || kv_c.size(0) < n || kv_c.stride(1) != 1)
        return false;
    bool kp_ok;
    if (k_pe.dim() == 3 && k_pe.size(1) == 1)
        kp_ok = k_pe.size(2) == kRope && k_pe.stride(2) == 1;
    else
        kp_ok = k_pe.dim() == 2 && k_pe.size(1) == kRope && k_pe.stride(1) == 1;
    if (!kp_ok || k_pe.size(0) < n) return false;
    mlakv_dtype code;
    if (!dtype_code(kv_c.scalar_type(), &code) || k_pe.scalar_type() != kv_c.scalar_type())
        return false;
    if (cuda && (code == MLAKV_F32 || g_api.cuda_write == nullptr)) return false;
    mlakv_cache c;
    if (!cache_of(kv_cache, format, latent_scale, &c)) return false;
    if (n == 0) return true;
    const int64_t kvs = n > 1 ? kv_c.stride(0) : kLatent, kps = n > 1 ? k_pe.stride(0) : kRope;
    mlakv_write_options o = g_api.write_options_default();
    o.fp8_scale_recipe = (mlakv_fp8_scale_recipe)recipe;
    o.nvfp4_encoder = (mlakv_nvfp4_encoder)encoder;
    mlakv_status st;
    if (cuda) {
#ifdef MLAKV_TORCH_CUDA
        const c10::cuda::CUDAGuard guard(dev);
        st = g_api.cuda_write(&c, n, kv_c.data_ptr(), kvs, k_pe.data_ptr(), kps, code,
                              slots.data_ptr<int64_t>(), &o, nullptr, stream_of(dev));
#else
        return false;
#endif
    } else {
        st = g_api.write(&c, n, kv_c.data_ptr(), kvs, k_pe.data_ptr(), kps, code,
                         slots.data_ptr<int64_t>(), &o);
    }
    return st == MLAKV_OK;
}

template <bool kCuda>
void write_kernel(const Tensor &kv_cache, const Tensor &kv_c, const Tensor &k_pe,
                  const Tensor &slots, c10::string_view format, int64_t recipe,
                  double latent_scale, int64_t encoder) {
    if (write_fast(kCuda, kv_cache, kv_c, k_pe, slots, format, recipe, latent_scale, encoder))
        return;
    py::gil_scoped_acquire gil;
    (*g_py_write)(kv_cache, kv_c, k_pe, slots, std::string(format), recipe, latent_scale,
                  encoder);
}

// ---- sparse decode --------------------------------------------------------------------------

// The checks of _make_decode_entry / _optional_inputs / _check_outputs and the call; out and
// lse are allocated here when `alloc`. false: the Python kernel takes the call.
bool decode_fast(bool cuda, const Tensor &q, const Tensor &kv_cache, const Tensor &indices,
                 c10::string_view format, std::optional<double> sm_scale, const OptTensor &lengths,
                 const OptTensor &sink, const OptTensor &workspace, int64_t num_threads,
                 double latent_scale, bool alloc, Tensor &out, Tensor &lse) {
    const c10::Device dev = kv_cache.device();
    if (q.device() != dev || indices.device() != dev) return false;
    const c10::ScalarType qt = q.scalar_type();
    if (qt != c10::ScalarType::BFloat16 && (cuda || qt != c10::ScalarType::Float)) return false;
    if (q.dim() != 4 || q.size(3) != kQk || q.stride(3) != 1) return false;
    const int64_t b = q.size(0), s_q = q.size(1), h = q.size(2);
    if (indices.scalar_type() != c10::ScalarType::Int || indices.dim() != 3 ||
        indices.size(0) != b || indices.size(1) != s_q ||
        (indices.size(2) > 1 && indices.stride(2) != 1))
        return false;
    if (!no_negative_strides(q) || !no_negative_strides(indices)) return false;
    if (!vector_ok(lengths, c10::ScalarType::Int, b, dev) ||
        !vector_ok(sink, c10::ScalarType::Float, h, dev))
        return false;
    mlakv_cache c;
    if (!cache_of(kv_cache, format, latent_scale, &c)) return false;
    const int64_t topk = indices.size(2);
    mlakv_decode_args a = g_api.decode_args_default(b, s_q, h, topk);
    int64_t qs[4], is[3];
    unit_strides(q, qs);
    unit_strides(indices, is);
    a.q_stride_batch = qs[0], a.q_stride_token = qs[1], a.q_stride_head = qs[2];
    a.indices_stride_batch = is[0], a.indices_stride_token = is[1];
    mlakv_dtype qcode;
    dtype_code(qt, &qcode);
    a.q_dtype = a.out_dtype = qcode;
    if (sm_scale.has_value()) a.sm_scale = (float)*sm_scale;
    a.num_threads = (int)num_threads;
    a.q = q.data_ptr();
    a.indices = indices.data_ptr<int32_t>();
    a.lengths = static_cast<const int32_t *>(ptr_or_null(lengths));
    a.sink = static_cast<const float *>(ptr_or_null(sink));
#ifdef MLAKV_TORCH_CUDA
    std::optional<c10::cuda::CUDAGuard> guard;
    if (cuda) guard.emplace(dev);
#endif
    if (alloc) {
        out = at::empty({b, s_q, h, kV}, q.options());
        lse = at::empty({b, s_q, h}, q.options().dtype(c10::ScalarType::Float));
    } else if (out.sizes() != c10::IntArrayRef({b, s_q, h, kV}) || out.scalar_type() != qt ||
               out.device() != dev || !out.is_contiguous() ||
               lse.sizes() != c10::IntArrayRef({b, s_q, h}) ||
               lse.scalar_type() != c10::ScalarType::Float || lse.device() != dev ||
               !lse.is_contiguous()) {
        return false;
    }
    a.out = out.data_ptr();
    a.lse = lse.data_ptr<float>();
    if (!cuda) return g_api.sparse_decode(&c, &a) == MLAKV_OK;
#ifdef MLAKV_TORCH_CUDA
    if (g_api.cuda_sparse_decode == nullptr || g_api.cuda_decode_workspace_size == nullptr)
        return false;
    size_t need = 0;
    if (g_api.cuda_decode_workspace_size(&c, &a, &need) != MLAKV_OK) return false;
    void *ws = nullptr;
    size_t ws_bytes = 0;
    Tensor scratch;
    if (need > 0) {
        if (workspace.has_value()) {
            const Tensor &w = *workspace;
            ws_bytes = (size_t)w.numel() * (size_t)w.element_size();
            if (w.device() != dev || ws_bytes < need || !w.is_contiguous()) return false;
            ws = w.data_ptr();
        } else { // from torch's caching allocator (inside a graph capture: the graph's pool)
            scratch = at::empty({(int64_t)need}, q.options().dtype(c10::ScalarType::Byte));
            ws = scratch.data_ptr();
            ws_bytes = need;
        }
    }
    return g_api.cuda_sparse_decode(&c, &a, ws, ws_bytes, stream_of(dev)) == MLAKV_OK;
#else
    (void)workspace;
    return false;
#endif
}

py::object opt(const std::optional<double> &v) { return v ? py::cast(*v) : py::none(); }
py::object opt(const OptTensor &v) { return v ? py::cast(*v) : py::none(); }

template <bool kCuda>
std::tuple<Tensor, Tensor> decode_kernel(const Tensor &q, const Tensor &kv_cache,
                                         const Tensor &indices, c10::string_view format,
                                         std::optional<double> sm_scale, const OptTensor &lengths,
                                         const OptTensor &sink, const OptTensor &workspace,
                                         int64_t num_threads, double latent_scale) {
    Tensor out, lse;
    if (decode_fast(kCuda, q, kv_cache, indices, format, sm_scale, lengths, sink, workspace,
                    num_threads, latent_scale, true, out, lse))
        return {out, lse};
    py::gil_scoped_acquire gil;
    py::object r = (*g_py_decode)(q, kv_cache, indices, std::string(format), opt(sm_scale),
                                  opt(lengths), opt(sink), opt(workspace), num_threads,
                                  latent_scale);
    return r.cast<std::tuple<Tensor, Tensor>>();
}

template <bool kCuda>
void decode_out_kernel(const Tensor &q, const Tensor &kv_cache, const Tensor &indices,
                       c10::string_view format, const Tensor &out, const Tensor &lse,
                       std::optional<double> sm_scale, const OptTensor &lengths,
                       const OptTensor &sink, const OptTensor &workspace, int64_t num_threads,
                       double latent_scale) {
    Tensor o = out, l = lse;
    if (decode_fast(kCuda, q, kv_cache, indices, format, sm_scale, lengths, sink, workspace,
                    num_threads, latent_scale, false, o, l))
        return;
    py::gil_scoped_acquire gil;
    (*g_py_decode_out)(q, kv_cache, indices, std::string(format), out, lse, opt(sm_scale),
                       opt(lengths), opt(sink), opt(workspace), num_threads, latent_scale);
}

std::vector<std::unique_ptr<torch::Library>> g_libs;

template <bool kCuda> void register_kernels(c10::DispatchKey key) {
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "mlakv", key, __FILE__,
                                                __LINE__);
    lib->impl("write", TORCH_FN(write_kernel<kCuda>));
    lib->impl("sparse_decode", TORCH_FN(decode_kernel<kCuda>));
    lib->impl("sparse_decode_out", TORCH_FN(decode_out_kernel<kCuda>));
    g_libs.push_back(std::move(lib));
}

// addresses: the C functions' addresses by name; the three Python kernels. Registers the CPU
// kernels, and the CUDA ones when compiled in.
void init(const py::dict &addresses, py::object py_write, py::object py_decode,
          py::object py_decode_out) {
    TORCH_CHECK(g_libs.empty(), "mlakv: the compiled ops are registered already");
    // an address of 0: the library does not export it (a CPU-only build: the CUDA kernels
    // then hand every call to the Python kernel, which says so)
    auto get = [&](const char *name) -> void * {
        TORCH_CHECK(addresses.contains(name), "mlakv: no address for ", name);
        return reinterpret_cast<void *>(addresses[name].cast<uintptr_t>());
    };
#define MLAKV_BIND(field) g_api.field = reinterpret_cast<decltype(g_api.field)>(get("mlakv_" #field))
    MLAKV_BIND(cache_init);
    MLAKV_BIND(cache_set_latent_scale);
    MLAKV_BIND(format_get);
    MLAKV_BIND(write_options_default);
    MLAKV_BIND(decode_args_default);
    MLAKV_BIND(write);
    MLAKV_BIND(sparse_decode);
#ifdef MLAKV_TORCH_CUDA
    MLAKV_BIND(cuda_write);
    MLAKV_BIND(cuda_sparse_decode);
    MLAKV_BIND(cuda_decode_workspace_size);
#endif
#undef MLAKV_BIND
    TORCH_CHECK(g_api.cache_init && g_api.cache_set_latent_scale && g_api.format_get &&
                    g_api.write_options_default && g_api.decode_args_default && g_api.write &&
                    g_api.sparse_decode,
                "mlakv: the library lacks a function the compiled ops need");
    g_py_write = new py::object(std::move(py_write));
    g_py_decode = new py::object(std::move(py_decode));
    g_py_decode_out = new py::object(std::move(py_decode_out));
    register_kernels<false>(c10::DispatchKey::CPU);
#ifdef MLAKV_TORCH_CUDA
    register_kernels<true>(c10::DispatchKey::CUDA);
#endif
}

bool has_cuda() {
#ifdef MLAKV_TORCH_CUDA
    return true;
#else
    return false;
#endif
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "compiled kernels of torch.ops.mlakv.write / sparse_decode / sparse_decode_out";
    m.def("init", &init, "register the compiled kernels (C function addresses, Python kernels)");
    m.def("has_cuda", &has_cuda, "whether the CUDA kernels were compiled in");
}
