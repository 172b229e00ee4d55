// Tells rustc where to find libxvk for linking; the library itself is linked by name ("xvk",
// in src/sys.rs) and found at run time by the platform loader (LD_LIBRARY_PATH, ld.so.cache).
// Search order: the directory in XVK_LIB_DIR, then `pkg-config --variable=libdir xvk`, then the
// linker's default directories (an installed libxvk-dev).
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=XVK_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if let Ok(dir) = env::var("XVK_LIB_DIR") {
        if !dir.is_empty() {
            println!("cargo:rustc-link-search=native={}", dir);
            return;
        }
    }
    let pkg_config = Command::new("pkg-config").args(["--variable=libdir", "xvk"]).output();
    if let Ok(out) = pkg_config {
        if out.status.success() {
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !dir.is_empty() {
                println!("cargo:rustc-link-search=native={}", dir);
            }
        }
    }
}
