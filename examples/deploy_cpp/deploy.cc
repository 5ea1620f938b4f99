// Run a module compiled by `tvm-pool compile` from C++, with TVM's runtime library only.
//
//   deploy MODEL.so [INPUT_DIR [OUTPUT_DIR]]
//
// The model's input/output names, shapes and dtypes are read from the `tvm_pool_signature`
// function that `tvm-pool compile` embeds in the module (a JSON string), so the program needs
// no ONNX file and no tvm_pool. Input `NAME` is read from INPUT_DIR/NAME.bin (raw, C order,
// the model's dtype); without INPUT_DIR inputs are filled with a fixed pattern. Outputs are
// printed (shape, dtype, sum) and, with OUTPUT_DIR, written to OUTPUT_DIR/NAME.bin.
//
// Only headers of TVM's FFI (shipped in the apache-tvm-ffi wheel) and DLPack are used; the
// program links libtvm_runtime.so and libtvm_ffi.so from the wheels. See build.sh.

#include <dlpack/dlpack.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;

namespace {

// Host memory for tensors we create (64-byte aligned, as TVM's kernels prefer).
struct CPUAllocator {
  void AllocData(DLTensor* tensor) {
    size_t nbytes = ffi::GetDataSize(*tensor);
    tensor->data = std::aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
  }
  void FreeData(DLTensor* tensor) { std::free(tensor->data); }
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
};

std::vector<TensorSpec> ParseSpecs(const ffi::Map<ffi::Any, ffi::Any>& signature, const char* key) {
  std::vector<TensorSpec> specs;
  for (const ffi::Any& item : signature.at(ffi::String(key)).cast<ffi::Array<ffi::Any>>()) {
    auto obj = item.cast<ffi::Map<ffi::Any, ffi::Any>>();
    TensorSpec spec;
    spec.name = std::string(obj.at(ffi::String("name")).cast<ffi::String>());
    spec.dtype = std::string(obj.at(ffi::String("dtype")).cast<ffi::String>());
    for (const ffi::Any& d : obj.at(ffi::String("shape")).cast<ffi::Array<ffi::Any>>()) {
      spec.shape.push_back(d.cast<int64_t>());  // tvm-pool compile requires static shapes
    }
    specs.push_back(spec);
  }
  return specs;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

double Sum(const ffi::Tensor& tensor) {
  const DLTensor* t = tensor.GetDLTensorPtr();
  const DLDataType dt = t->dtype;
  size_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= static_cast<size_t>(t->shape[i]);
  const char* base = static_cast<const char*>(t->data) + t->byte_offset;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (dt.code == kDLFloat && dt.bits == 32) sum += reinterpret_cast<const float*>(base)[i];
    else if (dt.code == kDLFloat && dt.bits == 64) sum += reinterpret_cast<const double*>(base)[i];
    else if (dt.code == kDLInt && dt.bits == 64) sum += static_cast<double>(reinterpret_cast<const int64_t*>(base)[i]);
    else if (dt.code == kDLInt && dt.bits == 32) sum += reinterpret_cast<const int32_t*>(base)[i];
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " MODEL.so [INPUT_DIR [OUTPUT_DIR]]\n";
    return 2;
  }
  const std::string input_dir = argc > 2 ? argv[2] : "";
  const std::string output_dir = argc > 3 ? argv[3] : "";
  // tvm_pool's schedules are parallel; TVM pins its worker threads but not the calling thread,
  // which can then share a worker's core (half speed). Unpin them unless the user chose.
  // Must happen before the first parallel call creates the thread pool. (On x86 TVM runs half
  // as many threads as logical CPUs unless TVM_NUM_THREADS is set: set it to the core count on a
  // machine without SMT, as importing tvm_pool does, see tvm_pool/thread_pool.py.)
  setenv("TVM_BIND_THREADS", "0", /*overwrite=*/0);
  try {
    // 1. Load the shared library and create a Relax VM on the CPU (pooled allocator = 2).
    // (dlopen searches the library path for names without a '/', so pass an absolute path.)
    ffi::Module lib = ffi::Module::LoadFromFile(std::filesystem::absolute(argv[1]).string());
    ffi::Module vm = lib->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
    const int64_t kPooledAllocator = 2;
    vm->GetFunction("vm_initialization").value()(static_cast<int64_t>(kDLCPU), int64_t{0}, kPooledAllocator);

    // 2. Read the embedded signature.
    ffi::String text = vm->GetFunction("tvm_pool_signature").value()().cast<ffi::String>();
    auto signature = ffi::json::Parse(text).cast<ffi::Map<ffi::Any, ffi::Any>>();
    std::vector<TensorSpec> inputs = ParseSpecs(signature, "inputs");
    std::vector<TensorSpec> outputs = ParseSpecs(signature, "outputs");

    // 3. Make the input tensors.
    const DLDevice cpu{kDLCPU, 0};
    std::vector<ffi::Tensor> args;
    for (const TensorSpec& spec : inputs) {
      ffi::Tensor t = ffi::Tensor::FromNDAlloc(CPUAllocator(), ffi::Shape(spec.shape),
                                               ffi::StringToDLDataType(spec.dtype), cpu);
      size_t nbytes = ffi::GetDataSize(t);
      void* data = t.data_ptr();
      if (!input_dir.empty()) {
        std::string path = input_dir + "/" + spec.name + ".bin";
        std::ifstream in(path, std::ios::binary);
        if (!in.read(static_cast<char*>(data), static_cast<std::streamsize>(nbytes))) {
          std::cerr << "error: cannot read " << nbytes << " bytes from " << path << "\n";
          return 2;
        }
      } else if (spec.dtype == "float32") {
        float* p = static_cast<float*>(data);
        for (size_t i = 0; i < nbytes / sizeof(float); ++i) p[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
      } else {
        std::memset(data, 0, nbytes);
      }
      std::cout << "input  " << spec.name << ": " << spec.dtype << ShapeString(spec.shape) << "\n";
      args.push_back(t);
    }

    // 4. Run "main" (named in the signature) and collect the outputs.
    std::string entry = std::string(signature.at(ffi::String("entry")).cast<ffi::String>());
    ffi::Function main_fn = vm->GetFunction(entry).value();
    std::vector<ffi::AnyView> packed(args.begin(), args.end());
    ffi::Any result;
    main_fn.CallPacked(packed.data(), static_cast<int32_t>(packed.size()), &result);
    std::vector<ffi::Tensor> results;
    if (auto single = result.try_cast<ffi::Tensor>()) {
      results.push_back(*single);
    } else {
      for (const ffi::Any& item : result.cast<ffi::Array<ffi::Any>>()) results.push_back(item.cast<ffi::Tensor>());
    }
    if (results.size() != outputs.size()) {
      std::cerr << "error: main returned " << results.size() << " outputs, the signature lists " << outputs.size() << "\n";
      return 2;
    }

    // 5. Report (and save) the outputs.
    for (size_t i = 0; i < results.size(); ++i) {
      const DLTensor* t = results[i].GetDLTensorPtr();
      std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
      std::cout << "output " << outputs[i].name << ": " << std::string(ffi::DLDataTypeToString(t->dtype))
                << ShapeString(shape) << " sum=" << Sum(results[i]) << "\n";
      if (!output_dir.empty()) {
        std::ofstream out(output_dir + "/" + outputs[i].name + ".bin", std::ios::binary);
        out.write(static_cast<const char*>(t->data) + t->byte_offset,
                  static_cast<std::streamsize>(ffi::GetDataSize(*t)));
      }
    }
  } catch (const ffi::Error& err) {
    std::cerr << "error: " << err.kind() << ": " << err.message() << "\n";
    return 2;
  } catch (const std::exception& err) {
    std::cerr << "error: " << err.what() << "\n";
    return 2;
  }
  return 0;
}
