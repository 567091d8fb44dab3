//! Mints an RS256 access token for local testing and benchmarks:
//! `mint_token <private-key.pem> <kid> <issuer> <audience> <subject> "<scopes>" [lifetime-seconds]`.
//! Never use it with a production key.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 7 {
        eprintln!(
            "usage: mint_token <private-key.pem> <kid> <issuer> <audience> <subject> <scopes> [lifetime-seconds]"
        );
        std::process::exit(2);
    }
    let pem = std::fs::read(&args[1]).expect("the key file is readable");
    let lifetime: u64 = args.get(7).and_then(|l| l.parse().ok()).unwrap_or(3600);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let claims =
        json!({ "iss": args[3], "aud": args[4], "sub": args[5], "scope": args[6], "iat": now, "exp": now + lifetime });
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(args[2].clone());
    let key = EncodingKey::from_rsa_pem(&pem).expect("an RSA private key in PEM");
    println!("{}", jsonwebtoken::encode(&header, &claims, &key).expect("signing works"));
}
