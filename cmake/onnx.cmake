# The ONNX frontend (src/frontend/onnx/) reads .onnx files with the protobuf classes that
# Debian's libonnx-dev ships prebuilt in libonnx_proto.so (imported target `onnx_proto` from
# ONNXConfig.cmake; it links protobuf::libprotobuf), and takes the default of each op's
# attributes from the op schemas in libonnx.so (target `onnx`; onnx_attr_check.cpp), so that an
# attribute coil does not implement is accepted only at ONNX's own default. Nothing else of
# libonnx (checker, shape inference, version converter) is used.
# The generated headers select the ML variant of the schema and the namespace by macro; the
# onnx_proto target exports both definitions, and they are repeated here so that they are
# visible where they come from. PUBLIC: the tests build and parse protobufs too.
find_package(Protobuf REQUIRED)
find_package(ONNX REQUIRED CONFIG)
target_link_libraries(coil_core PUBLIC onnx onnx_proto protobuf::libprotobuf)
target_compile_definitions(coil_core PUBLIC ONNX_ML=1 ONNX_NAMESPACE=onnx)

