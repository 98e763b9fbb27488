fn main() {
    println!("ordo-verify: no checker yet");
}
