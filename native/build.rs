fn main() {
    // Sets the linker arguments a Node.js addon needs (its napi symbols resolve at load time).
    napi_build::setup();
}
