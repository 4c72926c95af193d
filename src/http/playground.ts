/** placeholder */
export function playgroundResponse(): Response {
  return new Response("todo", { status: 501 });
}
