# Sourced by hack/setup-envtest.sh and hack/build-kubectl.sh.

# kube_version_ldflags VERSION prints the -ldflags that stamp a Kubernetes
# binary with release VERSION (such as 1.33.13), as Kubernetes'
# hack/lib/version.sh does for release builds, stripped.
kube_version_ldflags() {
  local version="$1" minor flags="-s -w" pkg
  minor="${version#*.}"
  minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=${version%%.*} -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}
