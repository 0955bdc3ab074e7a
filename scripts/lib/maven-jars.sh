# Shared by the ensure-* scripts that fetch jars from Maven Central (source it, then call).
#   ensure_maven NAME                 Java 17+ (ensure-java) and mvn, installed with apt-get when missing
#   copy_pom_jars NAME POM DEST JAR…  POM's runtime jars into DEST unless DEST is complete for POM
#                                     (a stamp holding the pom's hash); each JAR must be there after
#                                     the copy; prints DEST on stdout

ensure_maven() {
    "$(dirname "${BASH_SOURCE[0]}")/../ensure-java" >&2
    command -v mvn >/dev/null 2>&1 && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo="sudo -n"
    if command -v apt-get >/dev/null 2>&1; then
        echo "$1: installing maven with apt-get" >&2
        $sudo apt-get update -qq >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2
    fi
    command -v mvn >/dev/null 2>&1 || { echo "$1: Maven (mvn) is needed to fetch jars from Maven Central" >&2; exit 1; }
}

copy_pom_jars() {
    local name=$1 pom=$2 dest=$3
    shift 3
    local stamp="$dest/.complete" pom_sum
    pom_sum=$(sha256sum "$pom" | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pom_sum" ]; then
        echo "$dest"
        return 0
    fi
    ensure_maven "$name"
    echo "$name: fetching the jars of $pom into $dest" >&2
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial"
    mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$dest.partial" >&2
    local jar
    for jar in "$@"; do
        compgen -G "$dest.partial/$jar" >/dev/null || { echo "$name: Maven left no $jar in $dest.partial" >&2; exit 1; }
    done
    rm -rf "$dest"
    mv "$dest.partial" "$dest"
    echo "$pom_sum" > "$stamp"
    echo "$dest"
}
