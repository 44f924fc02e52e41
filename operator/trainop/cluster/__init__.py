"""The local control plane: real etcd + Kubernetes binaries built from source, KWOK fake GPU nodes."""
