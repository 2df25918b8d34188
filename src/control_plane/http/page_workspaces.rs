//! The page's workspace forms beyond the buttons (#40): create one from an image or a devfile
//! (pasted, or a file uploaded: the form is multipart), and a workspace's devfile, shown as
//! stored, escaped.

use super::actions;
use super::callers::{shown, visible_devfile};
use super::page::{PageResult, SignedIn, home_page, session, sign_in_first};
use super::state::{ApiError, AppState, MAX_CREATE_BODY_BYTES, PAGE, bad_request, exists, front_door};
use super::ui;
use crate::control_plane::model::NewWorkspace;
use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Request, State};
use axum::http::{Extensions, HeaderMap, header};
use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::{get, post};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/workspaces", post(create_workspace).layer(DefaultBodyLimit::max(MAX_CREATE_BODY_BYTES)))
        .route("/agents/{agent}/workspaces/{name}/devfile", get(devfile_page))
        .layer(axum::middleware::from_fn_with_state(state, front_door::<{ PAGE }>))
}

/// The create form's fields, from a multipart body (the page's form) or a URL-encoded one.
#[derive(Default)]
struct CreateForm {
    fields: BTreeMap<String, String>,
    /// An uploaded devfile, when one was chosen.
    upload: Option<Vec<u8>>,
}

impl CreateForm {
    async fn read(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let multipart = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("multipart/form-data"));
        if !multipart {
            let axum::extract::Form(fields) =
                axum::extract::Form::<BTreeMap<String, String>>::from_request(request, state)
                    .await
                    .map_err(|e| bad_request(e.body_text()))?;
            return Ok(Self { fields, upload: None });
        }
        let mut parts = Multipart::from_request(request, state).await.map_err(|e| bad_request(e.body_text()))?;
        let mut form = Self::default();
        while let Some(field) = parts.next_field().await.map_err(|e| bad_request(e.body_text()))? {
            let name = field.name().unwrap_or_default().to_string();
            let bytes = field.bytes().await.map_err(|e| bad_request(e.body_text()))?;
            match name.as_str() {
                "devfile_file" if !bytes.is_empty() => form.upload = Some(bytes.to_vec()),
                "devfile_file" => {}
                _ => {
                    let text =
                        String::from_utf8(bytes.to_vec()).map_err(|_| bad_request(format!("{name}: not UTF-8")))?;
                    form.fields.insert(name, text);
                }
            }
        }
        Ok(form)
    }

    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map(String::as_str).unwrap_or_default()
    }

    fn new_workspace(&self) -> Result<NewWorkspace, ApiError> {
        let mut env = BTreeMap::new();
        for line in self.field("env").lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (key, value) =
                line.split_once('=').ok_or_else(|| bad_request(format!("environment line {line:?}: use KEY=VALUE")))?;
            env.insert(key.trim().to_string(), value.to_string());
        }
        let optional = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let devfile = match (&self.upload, optional(self.field("devfile"))) {
            (Some(_), Some(_)) => return Err(bad_request("paste a devfile or upload one, not both")),
            (Some(bytes), None) => {
                Some(crate::yaml::devfile_text(bytes).map_err(|e| bad_request(format!("the upload: {e}")))?.to_string())
            }
            (None, pasted) => pasted.map(|_| self.field("devfile").to_string()),
        };
        Ok(NewWorkspace {
            cpu: optional(self.field("cpu")),
            memory: optional(self.field("memory")),
            env,
            devfile,
            ..NewWorkspace::new(self.field("name").trim(), self.field("image").trim())
        })
    }
}

/// The create form: the workspace is the signed-in user's. A refusal shows the page again
/// with the reason (a devfile's, each fault at its path).
async fn create_workspace(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    extensions: Extensions,
    request: Request,
) -> PageResult {
    let form = CreateForm::read(request, &state).await;
    let created = async {
        let form = form?;
        signed_in.check(form.field("csrf"))?;
        let agent = form.field("agent").to_string();
        exists(&state, &agent).await?;
        let new = form.new_workspace()?;
        actions::create_workspace(&state, signed_in.caller(), state.client(&extensions), &agent, new).await
    }
    .await;
    match created {
        Ok(_) => Ok(Redirect::to(&state.link("/")).into_response()),
        Err(ApiError(status, problem)) => {
            Ok((status, Html(home_page(&state, &signed_in, "", Some(&problem)).await?)).into_response())
        }
    }
}

/// A workspace's devfile as stored, escaped; for one made from an image, the devfile it
/// stands for. Its owner's and the admins' alone, as the workspace is.
async fn devfile_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((agent, name)): Path<(String, String)>,
) -> PageResult {
    let path = format!(
        "/agents/{}/workspaces/{}/devfile",
        super::validation::url_part(&agent),
        super::validation::url_part(&name)
    );
    let Some(session) = session(&state, &headers).await? else { return Ok(sign_in_first(&state, &path)) };
    let signed_in = SignedIn(session);
    let (workspace, devfile, _) = visible_devfile(&state, signed_in.caller(), &agent, &name).await?;
    Ok(Html(ui::devfile_page(&signed_in.nav(), &shown(&state, workspace), &devfile)).into_response())
}
