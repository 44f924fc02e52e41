"""Integration tier: real kube-apiserver, etcd, scheduler, controller-manager and KWOK nodes."""
