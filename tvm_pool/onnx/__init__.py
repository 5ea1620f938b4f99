"""tvm_pool's ONNX frontend: TVM's Relax importer with tvm_pool's pooling converters."""
