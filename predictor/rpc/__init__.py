"""The thin gRPC layer over :mod:`predictor.service`.

The generated code (``predictor.rpc.generated``) is produced at build time by
:mod:`predictor.rpc.codegen` and imported statically by :mod:`predictor.rpc.protos`.
"""
