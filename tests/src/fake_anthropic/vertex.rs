//! Google Vertex AI as the fake serves it: `…/publishers/anthropic/models/{model}:streamRawPredict`
//! (a Messages body without `model`, with `anthropic_version: vertex-2023-10-16`, a bearer
//! token the fake issued) answered with the same script and stream as `/v1/messages`, and an
//! OAuth token endpoint (`/token`) that takes a service account's signed JWT (the JWT-bearer
//! grant) and issues tokens.

use super::{Recorded, Shared, answer, header_map, json_response, lock};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The prefix of every access token the fake issues.
pub const TOKEN_PREFIX: &str = "ya29.fake-";

/// A service-account key file (JSON) whose `token_uri` is this fake's, for
/// `GOOGLE_APPLICATION_CREDENTIALS`.
pub fn service_account(base_url: &str) -> Value {
    json!({
        "type": "service_account",
        "project_id": "tether-test",
        "private_key_id": "0123456789abcdef",
        "private_key": include_str!("vertex-test-key.pem"),
        "client_email": "tether@tether-test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": format!("{base_url}/token"),
    })
}

/// Whether `jwt`'s RS256 signature is the test service account's.
fn signed_by_the_test_key(jwt: &str) -> bool {
    use aws_lc_rs::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
    let Some((signed, signature)) = jwt.rsplit_once('.') else {
        return false;
    };
    let Ok(signature) =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(signature.trim_end_matches('='))
    else {
        return false;
    };
    UnparsedPublicKey::new(
        &RSA_PKCS1_2048_8192_SHA256,
        include_bytes!("vertex-test-key.pub.der"),
    )
    .verify(signed.as_bytes(), &signature)
    .is_ok()
}

/// A key file like [`service_account`]'s, signed with a key the fake does not know: its token
/// endpoint refuses it.
pub fn unknown_service_account(base_url: &str) -> Value {
    let mut key = service_account(base_url);
    key["private_key"] = include_str!("vertex-other-key.pem").into();
    key
}

/// `POST /token`: the JWT-bearer grant. Checks the assertion's RS256 signature against the test
/// service account's public key and its claims, records it, and issues a token.
pub(super) async fn token(
    State(state): State<Shared>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<BTreeMap<String, String>>,
) -> Response {
    let claims = form
        .get("assertion")
        .and_then(|jwt| jwt.split('.').nth(1))
        .and_then(|c| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c.trim_end_matches('='))
                .ok()
        })
        .and_then(|c: Vec<u8>| serde_json::from_slice::<Value>(&c).ok());
    let problem = match (&form.get("grant_type"), &claims) {
        (Some(g), _) if g.as_str() != "urn:ietf:params:oauth:grant-type:jwt-bearer" => {
            Some(format!("unsupported grant_type {g}"))
        }
        (None, _) => Some("grant_type missing".to_owned()),
        _ if !form
            .get("assertion")
            .is_some_and(|jwt| signed_by_the_test_key(jwt)) =>
        {
            Some("invalid_grant: the JWT's signature does not verify".to_owned())
        }
        (_, None) => Some("assertion is not a JWT".to_owned()),
        (_, Some(c))
            if !c["scope"]
                .as_str()
                .is_some_and(|s| s.contains("cloud-platform")) =>
        {
            Some(format!("the JWT asks for no cloud-platform scope: {c}"))
        }
        (_, Some(c)) if !c["aud"].as_str().is_some_and(|a| a.ends_with("/token")) => {
            Some(format!("the JWT's audience is not the token URI: {c}"))
        }
        _ => None,
    };
    let issued = {
        let mut inner = lock(&state);
        inner.recorded.push(Recorded {
            path: "/token".into(),
            headers: header_map(&headers),
            body: json!({"grant_type": form.get("grant_type"), "claims": claims}),
            rejected: problem.clone(),
        });
        inner.served += 1;
        inner.served
    };
    match problem {
        Some(p) => json_response(
            400,
            &json!({"error": "invalid_grant", "error_description": p}),
            &BTreeMap::new(),
        ),
        None => json_response(
            200,
            &json!({"access_token": format!("{TOKEN_PREFIX}{issued}"), "expires_in": 3600, "token_type": "Bearer"}),
            &BTreeMap::new(),
        ),
    }
}

/// `POST …/models/{model}:streamRawPredict`: Vertex's own rules, then the Messages API's on
/// the same request with the model from the path.
pub(super) async fn stream_raw_predict(
    State(state): State<Shared>,
    Path((project, region, model)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path =
        format!("/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}");
    let mut hmap = header_map(&headers);
    let sent: Result<Value, _> = serde_json::from_slice(&body);
    let as_sent = sent.as_ref().cloned().unwrap_or(Value::Null);
    let rejection = match (&sent, model.strip_suffix(":streamRawPredict")) {
        (_, None) => Some((404, format!("no method {model}"))),
        (Err(e), _) => Some((400, format!("request body is not valid JSON: {e}"))),
        (Ok(b), _) if b.get("model").is_some() => {
            Some((400, "model: Extra inputs are not permitted".to_owned()))
        }
        (Ok(b), _) if b["anthropic_version"] != "vertex-2023-10-16" => Some((
            400,
            format!(
                "anthropic_version: must be vertex-2023-10-16, got {}",
                b["anthropic_version"]
            ),
        )),
        _ if !hmap
            .get("authorization")
            .is_some_and(|a| a.starts_with(&format!("Bearer {TOKEN_PREFIX}"))) =>
        {
            Some((
                401,
                "Request had invalid authentication credentials.".to_owned(),
            ))
        }
        _ => None,
    };
    if let Some((status, message)) = rejection {
        return super::refuse(&state, path, hmap, as_sent, status, message);
    }
    let model = model.trim_end_matches(":streamRawPredict").to_owned();
    let parsed = sent.map(|mut b| {
        if let Some(map) = b.as_object_mut() {
            map.remove("anthropic_version");
            map.insert("model".into(), model.into());
        }
        b
    });
    hmap.insert("anthropic-version".into(), "2023-06-01".into());
    answer(
        &state,
        &path,
        hmap,
        parsed.map_err(|e| e.to_string()),
        as_sent,
        super::Framing::Sse,
    )
}
