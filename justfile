# Recipes mirror the scripts in hack/; the README's commands need no `just`.

# The local demo: real apiserver, agent, control plane, sample workspace.
demo:
    ./hack/demo.sh

# Everything CI runs.
test:
    ./hack/test.sh

# Regenerate crds/ from the Rust types.
crd:
    cargo run -q -- crd > crds/workspacesyncstatus.yaml

cluster-up:
    ./hack/local-cluster.sh up

cluster-down:
    ./hack/local-cluster.sh down

# End to end on kind (needs Docker and kind; not part of CI).
e2e:
    ./e2e/kind.sh
