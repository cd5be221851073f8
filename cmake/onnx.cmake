# The ONNX frontend (src/frontend/onnx/) reads .onnx files with the protobuf classes that
# Debian's libonnx-dev ships prebuilt in libonnx_proto.so (imported target `onnx_proto` from
# ONNXConfig.cmake; it links protobuf::libprotobuf). coil needs only the message classes, not
# libonnx.so (checker, shape inference, version converter).
# The generated headers select the ML variant of the schema and the namespace by macro; the
# onnx_proto target exports both definitions, and they are repeated here so that they are
# visible where they come from. PUBLIC: the tests build and parse protobufs too.
find_package(Protobuf REQUIRED)
find_package(ONNX REQUIRED CONFIG)
target_link_libraries(coil_core PUBLIC onnx_proto protobuf::libprotobuf)
target_compile_definitions(coil_core PUBLIC ONNX_ML=1 ONNX_NAMESPACE=onnx)

